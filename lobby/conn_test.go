package lobby_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/lobby"
)

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
