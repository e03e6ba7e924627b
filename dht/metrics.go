package dht

import (
	"context"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/prometheus/client_golang/prometheus"
)

// DHT operations and their outcomes, the label sets of
// meshagent_dht_lookups_total.
const (
	opProvide       = "provide"
	opFindProviders = "find_providers"

	outcomeSuccess  = "success"   // provided; or at least one provider found
	outcomeError    = "error"     // the provide failed
	outcomeNotFound = "not_found" // the lookup ended without a provider
)

// dhtMetrics counts the directory's lookups. A nil *dhtMetrics records
// nothing.
type dhtMetrics struct {
	lookups *prometheus.CounterVec
	seconds *prometheus.HistogramVec
}

func newDHTMetrics(reg prometheus.Registerer) (*dhtMetrics, error) {
	m := &dhtMetrics{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshagent_dht_lookups_total",
			Help: "DHT operations of the capability and topic directory, by op (provide, find_providers) and outcome (success, error, not_found).",
		}, []string{"op", "outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "meshagent_dht_lookup_seconds",
			Help:    "Duration of DHT operations, by op (provide, find_providers).",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 8), // 5 ms to 82 s: a walk of the network is slow
		}, []string{"op"}),
	}
	for _, c := range []prometheus.Collector{m.lookups, m.seconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *dhtMetrics) observe(op, outcome string, start time.Time) {
	if m == nil {
		return
	}
	m.lookups.WithLabelValues(op, outcome).Inc()
	m.seconds.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

// provide provides k to the DHT, recording the operation.
func (d *Directory) provide(ctx context.Context, k cid.Cid) error {
	start := time.Now()
	err := d.kad.Provide(ctx, k, true)
	outcome := outcomeSuccess
	if err != nil {
		outcome = outcomeError
	}
	d.met.observe(opProvide, outcome, start)
	return err
}
