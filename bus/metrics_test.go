package bus_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/wait"
)

// TestMetrics: one message processed, one asked to be retried until it
// is a dead letter (three deliveries, two retries), one with no
// subscriber (a dead letter at once).
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := openStore(t, filepath.Join(t.TempDir(), "bus.db"))
	_, url := busServer(t, fakemesh.New(), st, bus.WithMetrics(reg))
	flaky := newPeer(t, url, "flaky", func(d delivery) (any, error) {
		if d.topic == "task:ok" {
			return map[string]any{"processed": true}, nil
		}
		return map[string]any{"processed": false, "should_retry": true, "retry_seconds": 0, "message": "busy"}, nil
	})
	flaky.subscribe(t, map[string]any{"topic": "task:*"})
	flaky.subscribe(t, map[string]any{"topic": "other"})
	sender := newPeer(t, url, "sender", nil)
	sender.send(t, "task:ok", "done at once")
	sender.send(t, "task:1", "work")
	sender.send(t, "nobody:1", "lost")
	waitFor(t, "the dead letters", func() bool {
		var dls []bus.StoredMessage
		_ = sender.Call(ctxT(t), "bus.deadLetters", map[string]any{}, &dls)
		return len(dls) == 2
	})
	want := `
# HELP meshagent_bus_acks_total Deliveries to local subscribers, first attempts and retries, by outcome (processed, not_processed, retry, failed).
# TYPE meshagent_bus_acks_total counter
meshagent_bus_acks_total{outcome="failed"} 0
meshagent_bus_acks_total{outcome="not_processed"} 0
meshagent_bus_acks_total{outcome="processed"} 1
meshagent_bus_acks_total{outcome="retry"} 3
# HELP meshagent_bus_dead_letters_total Messages the bus gave up on and put in the dead-letter queue.
# TYPE meshagent_bus_dead_letters_total counter
meshagent_bus_dead_letters_total 2
# HELP meshagent_bus_retries_total Failed deliveries put in the outbox to be tried again.
# TYPE meshagent_bus_retries_total counter
meshagent_bus_retries_total 2
# HELP meshagent_bus_subscriptions Subscriptions of local API clients to bus topics, default handlers included.
# TYPE meshagent_bus_subscriptions gauge
meshagent_bus_subscriptions 2
`
	// The counters move just after the store's writes that the dead
	// letters' query sees.
	if err := wait.Until(5*time.Second, func() error {
		return testutil.GatherAndCompare(reg, strings.NewReader(want))
	}); err != nil {
		t.Error(err)
	}
}
