package rpc_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/rpc"
)

// initialized dials url and initializes as id.
func initialized(t *testing.T, url, id string) *rpc.Client {
	t.Helper()
	return dialClient(t, url, rpc.WithClientID(id), rpc.WithClientInfo(rpc.ClientInfo{Name: "test"}))
}

// A flood of connections that never initialize fills the server; a fresh
// client still gets in, initializes and is answered within 2 s, at the
// expense of the oldest idle connection, which is told why. Only when
// every slot holds an initialized client is a newcomer refused (503).
func TestIdleFloodDoesNotLockOut(t *testing.T) {
	const max = 8
	l := rpc.DefaultLimits()
	l.MaxClients = max
	l.InitTimeout = time.Minute // the flood stays unless evicted
	ts := newTestServer(t, rpc.WithLimits(l))
	idle := make([]*websocket.Conn, 2*max)
	for i := range idle {
		idle[i] = dialBare(t, ts.url)
	}
	waitFor(t, "the flood to hold every slot", func() bool { return ts.srv.Clients() <= max })
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, ts.url, rpc.WithClientID("honest")) // Dial initializes
	if err != nil {
		t.Fatalf("fresh client refused: %v", err)
	}
	defer c.Close()
	var pong rpc.PingResult
	if err := c.Call(ctx, rpc.MethodPing, nil, &pong); err != nil || pong.Timestamp == "" {
		t.Fatalf("ping: %+v %v", pong, err)
	}
	t.Logf("fresh client served in %v with %d idle connections", time.Since(start), len(idle))
	// The oldest idle connections made room, and were told why.
	expectClosed(t, idle[0], testTimeout, "evicted: server full")

	// Fill every slot with initialized clients: now a newcomer is refused.
	for i := range max - 1 {
		initialized(t, ts.url, "member-"+string(rune('a'+i)))
	}
	_, resp, err := websocket.Dial(ctxT(t), ts.url, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("newcomer with every slot initialized: %v (%v), want HTTP 503", err, resp)
	}
}

// A connection that never initializes is closed after InitTimeout with a
// reason naming the deadline; an initialized one stays.
func TestInitDeadline(t *testing.T) {
	l := rpc.DefaultLimits()
	l.InitTimeout = 200 * time.Millisecond
	ts := newTestServer(t, rpc.WithLimits(l))
	kept := initialized(t, ts.url, "kept")
	start := time.Now() // before the dial: the server's clock starts during it
	idle := dialBare(t, ts.url)
	expectClosed(t, idle, testTimeout, "initialize deadline")
	if d := time.Since(start); d < l.InitTimeout {
		t.Fatalf("closed after %v, before the deadline", d)
	}
	// A client Dial initialized, served mesh.*, is established too.
	local := dialClient(t, ts.url)
	if err := local.Call(ctxT(t), rpc.MethodMeshID, nil, nil); err != nil {
		t.Fatal(err)
	}
	// Both stay served across several deadlines.
	wait.Holds(t, 4*l.InitTimeout, func() error {
		for _, c := range []*rpc.Client{kept, local} {
			if err := c.Call(ctxT(t), rpc.MethodPing, nil, nil); err != nil {
				return fmt.Errorf("established client cut: %w", err)
			}
		}
		return nil
	})
}

// MaxClientsPerIP bounds one address: its oldest idle connection makes
// room; when all of its connections are initialized it is refused (429).
func TestMaxClientsPerIP(t *testing.T) {
	l := rpc.DefaultLimits()
	l.MaxClientsPerIP = 2
	l.PerIPExempt = nil // loopback counts here
	l.InitTimeout = time.Minute
	ts := newTestServer(t, rpc.WithLimits(l))
	a := initialized(t, ts.url, "a")
	idle := dialBare(t, ts.url)
	b := initialized(t, ts.url, "b") // evicts idle
	expectClosed(t, idle, testTimeout, "too many connections from this address")
	_, resp, err := websocket.Dial(ctxT(t), ts.url, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("third initialized-address client: %v (%v), want HTTP 429", err, resp)
	}
	for _, c := range []*rpc.Client{a, b} {
		if err := c.Call(ctxT(t), rpc.MethodPing, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	// Exempt by default: the same address holds more than 2.
	ts2 := newTestServer(t, rpc.WithLimits(func() rpc.Limits { l := rpc.DefaultLimits(); l.MaxClientsPerIP = 2; return l }()))
	for i := range 4 {
		initialized(t, ts2.url, "x"+string(rune('0'+i)))
	}
}
