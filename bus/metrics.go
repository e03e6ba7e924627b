package bus

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Ack outcomes, the label set of meshagent_bus_acks_total: what one
// delivery to one subscriber came to.
const (
	ackProcessed    = "processed"     // the subscriber processed it
	ackNotProcessed = "not_processed" // the subscriber answered, not processed, no retry asked
	ackRetry        = "retry"         // the subscriber asked for a retry (should_retry)
	ackFailed       = "failed"        // no answer: the client left, timed out or answered an error
)

// busMetrics counts the bus's deliveries. A nil *busMetrics records
// nothing.
type busMetrics struct {
	acks        *prometheus.CounterVec
	retries     prometheus.Counter
	deadLetters prometheus.Counter
}

func newBusMetrics(reg prometheus.Registerer, subs *subTable) (*busMetrics, error) {
	m := &busMetrics{
		acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshagent_bus_acks_total",
			Help: "Deliveries to local subscribers, first attempts and retries, by outcome (processed, not_processed, retry, failed).",
		}, []string{"outcome"}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshagent_bus_retries_total",
			Help: "Failed deliveries put in the outbox to be tried again.",
		}),
		deadLetters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshagent_bus_dead_letters_total",
			Help: "Messages the bus gave up on and put in the dead-letter queue.",
		}),
	}
	gauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshagent_bus_subscriptions",
		Help: "Subscriptions of local API clients to bus topics, default handlers included.",
	}, func() float64 { return float64(subs.count()) })
	for _, o := range []string{ackProcessed, ackNotProcessed, ackRetry, ackFailed} {
		m.acks.WithLabelValues(o) // every outcome is exported from the start, at 0
	}
	for _, c := range []prometheus.Collector{m.acks, m.retries, m.deadLetters, gauge} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// acked counts a delivery's outcome and returns it.
func (m *busMetrics) acked(a attempt) attempt {
	if m == nil {
		return a
	}
	outcome := ackNotProcessed
	switch {
	case a.err != nil:
		outcome = ackFailed
	case a.pr.ShouldRetry:
		outcome = ackRetry
	case a.pr.Processed:
		outcome = ackProcessed
	}
	m.acks.WithLabelValues(outcome).Inc()
	return a
}

func (m *busMetrics) retry() {
	if m != nil {
		m.retries.Inc()
	}
}

func (m *busMetrics) deadLetter() {
	if m != nil {
		m.deadLetters.Inc()
	}
}

// count returns how many subscriptions the table holds.
func (t *subTable) count() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.subs)
}
