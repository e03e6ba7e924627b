package lobby

import (
	"github.com/prometheus/client_golang/prometheus"
)

// REGISTER outcomes, the label set of meshagent_lobby_registers_total.
const (
	registerNew     = "new"     // a new agent_id registered
	registerAgain   = "again"   // a registered agent re-registered with its token
	registerRefused = "refused" // answered with an ERROR
)

// lobbyMetrics counts REGISTERs. A nil *lobbyMetrics records nothing.
type lobbyMetrics struct {
	registers *prometheus.CounterVec
}

func newLobbyMetrics(reg prometheus.Registerer, l *Lobby) (*lobbyMetrics, error) {
	m := &lobbyMetrics{
		registers: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshagent_lobby_registers_total",
			Help: "REGISTER messages the lobby answered, by outcome (new, again, refused).",
		}, []string{"outcome"}),
	}
	for _, o := range []string{registerNew, registerAgain, registerRefused} {
		m.registers.WithLabelValues(o) // every outcome is exported from the start, at 0
	}
	registered := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshagent_lobby_registrations",
		Help: "Agents registered with the lobby (kept in its store).",
	}, func() float64 {
		l.regMu.Lock()
		defer l.regMu.Unlock()
		return float64(l.registered)
	})
	connected := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshagent_lobby_agents_connected",
		Help: "Registered agents connected to the lobby now.",
	}, func() float64 {
		l.mu.Lock()
		defer l.mu.Unlock()
		return float64(len(l.agents))
	})
	for _, c := range []prometheus.Collector{m.registers, registered, connected} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *lobbyMetrics) register(outcome string) {
	if m != nil {
		m.registers.WithLabelValues(outcome).Inc()
	}
}
