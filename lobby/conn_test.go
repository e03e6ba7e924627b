package lobby_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
)

// The lobby: a connection that neither REGISTERs nor authenticates is
// closed after InitTimeout; a flood of idle ones does not keep a new
// agent out.
func TestRegisterDeadlineAndFlood(t *testing.T) {
	l := lobby.DefaultLimits()
	l.MaxClients = 4
	l.InitTimeout = 300 * time.Millisecond
	tl := newTestLobby(t, lobby.WithLimits(l))
	idle := dialRaw(t, tl.url)
	expectClosed(t, idle, testTimeout, "register deadline")

	flood := make([]*websocket.Conn, 8)
	for i := range flood {
		flood[i] = dialRaw(t, tl.url)
	}
	for _, id := range []string{"agent_a", "agent_b", "agent_c"} {
		c := dialLobby(t, tl.url, id)
		c.register()
	}
	expectClosed(t, flood[0], testTimeout, "evicted: server full")
	// Registered agents outlive the deadline.
	c := dialLobby(t, tl.url, "agent_d")
	c.register()
	// Across two deadlines the agent is answered every time it asks.
	wait.Holds(t, 2*l.InitTimeout, func() error { c.quiet(); return nil })
}

func TestSlowConsumer(t *testing.T) {
	limits := lobby.DefaultLimits()
	limits.SendQueue, limits.WriteTimeout, limits.MaxConcurrentCalls = 128, 300*time.Millisecond, 128
	tl := newTestLobby(t, lobby.WithLimits(limits))
	// A provider that never reads again after registering.
	stuck := dialLobby(t, tl.url, "stuck")
	stuck.register(protocol.Capability{Name: "sink"})
	flooder := dialLobby(t, tl.url, "flooder")
	flooder.register()
	other := dialLobby(t, tl.url, "other")
	other.register(protocol.Capability{Name: "fine"})

	// The flooder reads all the time, so that only the stuck agent is slow.
	types := make(chan string, 256)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			_, b, err := flooder.ws.Read(context.Background())
			if err != nil {
				return
			}
			var m lobby.Message
			_ = json.Unmarshal(b, &m)
			types <- m.MessageType
		}
	}()
	sinkOffered := func() bool {
		return slices.ContainsFunc(tl.lobby.Capabilities(), func(c protocol.Capability) bool { return c.Name == "sink" })
	}
	big := strings.Repeat("x", 256<<10)
	sent := 0
	for ; sent < 100 && sinkOffered(); sent++ {
		flooder.send(lobby.TypeRequest, "stuck", fmt.Sprintf("f%d", sent), map[string]any{"capability_name": "sink", "blob": big})
		// Meanwhile others are served at once.
		other.send(lobby.TypeDiscoverServices, lobby.DefaultID, "", lobby.DiscoverServicesPayload{CapabilityName: "fine"})
		other.expect(lobby.TypeServicesAvailable)
	}
	wait.For(t, testTimeout, func() error {
		if sinkOffered() {
			return errors.New("the stuck agent is still connected")
		}
		return nil
	})
	// Every request the flooder sent is answered, with an error.
	for i := range sent {
		if got := receive(t, types, fmt.Sprintf("RESPONSE %d of %d", i+1, sent)); got != lobby.TypeResponse {
			t.Fatalf("flooder received %s", got)
		}
	}
	other.quiet()
	_ = flooder.ws.CloseNow()
	receive(t, readerDone, "the flooder's reader")
}

func TestOriginsAndMaxClients(t *testing.T) {
	limits := lobby.DefaultLimits()
	limits.MaxClients = 2
	tl := newTestLobby(t, lobby.WithOriginPatterns("app.example.com"), lobby.WithLimits(limits))
	for _, tc := range []struct {
		origin string
		status int
	}{
		{"https://evil.example", http.StatusForbidden},
		{"https://app.example.com", 0},
		{"", 0}, // not a browser
	} {
		h := http.Header{}
		if tc.origin != "" {
			h.Set("Origin", tc.origin)
		}
		ws, resp, err := websocket.Dial(ctxT(t), tl.url, &websocket.DialOptions{HTTPHeader: h})
		if tc.status == 0 {
			if err != nil {
				t.Fatalf("origin %q refused: %v", tc.origin, err)
			}
			defer ws.CloseNow()
			// Registered, so that the third client is refused rather than
			// given the slot of a connection that never registered.
			(&lobbyClient{t: t, ws: ws, id: fmt.Sprintf("agent_origin_%d", len(tc.origin))}).register()
			continue
		}
		if err == nil {
			_ = ws.CloseNow()
			t.Fatalf("origin %q accepted", tc.origin)
		}
		if resp == nil || resp.StatusCode != tc.status {
			t.Fatalf("origin %q refused with %v, want HTTP %d", tc.origin, resp, tc.status)
		}
	}
	wait.For(t, testTimeout, func() error {
		if n := tl.lobby.Clients(); n != 2 {
			return fmt.Errorf("%d clients, want 2", n)
		}
		return nil
	})
	_, resp, err := websocket.Dial(ctxT(t), tl.url, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a third client: %v %v, want HTTP 503", resp, err)
	}
}

func TestClose(t *testing.T) {
	tl := newTestLobby(t)
	hunter := dialLobby(t, tl.url, "hunter")
	hunter.register(protocol.Capability{Name: "search"})
	shopper := dialLobby(t, tl.url, "shopper")
	shopper.register()
	// A request in flight from a lobby client, one from the mesh, and a
	// mesh call that blocks.
	shopper.send(lobby.TypeRequest, "hunter", "c1", map[string]any{"capability_name": "search"})
	hunter.expect(lobby.TypeRequest)
	shopper.send(lobby.TypeRequest, peerID, "c2", map[string]any{"capability_name": "block"})
	receive(t, tl.mesh.Entered, "the mesh call")
	served := make(chan error, 1)
	go func() {
		_, err := tl.lobby.Serve(context.Background(), peerID, "search", nil)
		served <- err
	}()
	hunter.expect(lobby.TypeRequest)

	var closed atomic.Bool
	go func() {
		_ = tl.lobby.Close()
		closed.Store(true)
	}()
	if err := receive(t, served, "Serve to end"); protocol.CodeOf(err) != protocol.CodeInternalError {
		t.Fatalf("Serve during Close: %v", err)
	}
	receive(t, tl.mesh.Cancelled, "the mesh call to be cancelled")
	for _, c := range []*lobbyClient{hunter, shopper} {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		for {
			if _, _, err := c.ws.Read(ctx); err != nil {
				if s := websocket.CloseStatus(err); s != websocket.StatusGoingAway {
					t.Errorf("%s: closed with %v, want 1001", c.id, err)
				}
				break
			}
		}
		cancel()
	}
	wait.For(t, testTimeout, func() error {
		if !closed.Load() {
			return errors.New("Close has not returned")
		}
		return nil
	})
	if _, err := tl.lobby.Serve(ctxT(t), peerID, "search", nil); protocol.CodeOf(err) != protocol.CodeInternalError {
		t.Fatalf("Serve after Close: %v", err)
	}
	if err := tl.lobby.Close(); err != nil {
		t.Fatal(err)
	}
}
