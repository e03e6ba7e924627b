package lobby_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
)

// TestMetrics: two agents register, one again with its token, one over
// the bound is refused; one of the two leaves.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	tl := lobbyAt(t, filepath.Join(t.TempDir(), "store.db"), lobby.WithMaxRegistrations(2), lobby.WithMetrics(reg))
	a := dialLobby(t, tl.url, "agent_a")
	a.register()
	b := dialLobby(t, tl.url, "agent_b")
	b.register()
	a.register(protocol.Capability{Name: "again"})
	c := dialLobby(t, tl.url, "agent_c")
	c.send(lobby.TypeRegister, lobby.DefaultID, "", lobby.RegisterPayload{})
	c.expectError(protocol.CodeRateLimited, "most registrations")
	_ = b.ws.CloseNow()
	want := `
# HELP meshagent_lobby_agents_connected Registered agents connected to the lobby now.
# TYPE meshagent_lobby_agents_connected gauge
meshagent_lobby_agents_connected 1
# HELP meshagent_lobby_registers_total REGISTER messages the lobby answered, by outcome (new, again, refused).
# TYPE meshagent_lobby_registers_total counter
meshagent_lobby_registers_total{outcome="again"} 1
meshagent_lobby_registers_total{outcome="new"} 2
meshagent_lobby_registers_total{outcome="refused"} 1
# HELP meshagent_lobby_registrations Agents registered with the lobby (kept in its store).
# TYPE meshagent_lobby_registrations gauge
meshagent_lobby_registrations 2
`
	// b's leaving is seen when its connection's goroutines end.
	if err := wait.Until(5*time.Second, func() error {
		return testutil.GatherAndCompare(reg, strings.NewReader(want))
	}); err != nil {
		t.Error(err)
	}
}
