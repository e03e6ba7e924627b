package relay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/relay"
)

// Helpers the lobby's tests share with the JSON-RPC server's (now in
// package rpc) while the lobby lives here.

var update = flag.Bool("update", false, "rewrite the <-- lines of testdata/*.txt with what the server sends")

// compact returns s as compact JSON, or s itself if it is not JSON.
func compact(s string) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		return s
	}
	return buf.String()
}

// exampleMesh stands in for a running node: its one agent, reachable as
// peerID, offers "greet", which reports progress once.
type exampleMesh struct{}

func (exampleMesh) AgentID() string            { return selfID }
func (exampleMesh) Peers() []protocol.PeerInfo { return nil }

func (exampleMesh) Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error) {
	if req.Action != "greet" {
		return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "no capability %q", req.Action)
	}
	var p struct{ Name string }
	if err := json.Unmarshal(req.Params, &p); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "params: %v", err)
	}
	req.Progress(&protocol.Response{CorrelationID: "c-1", Status: protocol.StatusInProgress, Result: json.RawMessage(`"thinking"`)})
	return &protocol.Response{CorrelationID: "c-1", Status: protocol.StatusSuccess, Result: json.RawMessage(fmt.Sprintf(`{"greeting":"hello, %s"}`, p.Name))}, nil
}

// expectClosed reads from ws until the server closes it, and checks the
// close status is 1008 with a reason containing want.
func expectClosed(t *testing.T, ws *websocket.Conn, within time.Duration, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		_, _, err := ws.Read(ctx)
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			t.Fatalf("connection not closed by the server within %v: %v", within, err)
		}
		if ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, want) {
			t.Fatalf("closed with %d %q, want 1008 with %q", ce.Code, ce.Reason, want)
		}
		return
	}
}

// The lobby: a connection that neither REGISTERs nor authenticates is
// closed after InitTimeout; a flood of idle ones does not keep a new
// agent out.
func TestLobbyRegisterDeadlineAndFlood(t *testing.T) {
	l := relay.DefaultLimits()
	l.MaxClients = 4
	l.InitTimeout = 300 * time.Millisecond
	tl := newTestLobby(t, relay.WithLobbyLimits(l))
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
