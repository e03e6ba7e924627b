package store

import (
	"context"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	bolt "go.etcd.io/bbolt"
)

// storeMetrics times the store's writes; the gauges read the file at
// each scrape. A nil *storeMetrics records nothing.
type storeMetrics struct {
	commit prometheus.Histogram
}

// newStoreMetrics registers s's figures with reg. The outbox and
// dead-letter gauges count keys (bbolt's bucket statistics walk the
// bucket's pages), so a scrape costs one read transaction.
func newStoreMetrics(reg prometheus.Registerer, s *Store) (*storeMetrics, error) {
	m := &storeMetrics{
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshagent_store_commit_seconds",
			Help:    "Time a write to the message store took until it was on disk (fsync'd), its wait for a shared commit included.",
			Buckets: prometheus.ExponentialBuckets(0.00025, 4, 9), // 0.25 ms to 16 s
		}),
	}
	size := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshagent_store_size_bytes",
		Help: "Size of the message store's file on disk.",
	}, func() float64 {
		fi, err := os.Stat(s.Path())
		if err != nil {
			return 0
		}
		return float64(fi.Size())
	})
	outbox := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshagent_store_outbox_messages",
		Help: "Messages in the outbox (retries, and messages waiting for their recipient), every queue included.",
	}, func() float64 { return s.keys(bucketOutbox) })
	dead := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "meshagent_store_dead_letters",
		Help: "Dead letters kept in the store.",
	}, func() float64 { return s.keys(bucketDLQ) })
	for _, c := range []prometheus.Collector{m.commit, size, outbox, dead} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *storeMetrics) observeCommit(start time.Time) {
	if m != nil {
		m.commit.Observe(time.Since(start).Seconds())
	}
}

// keys counts the keys of a bucket, 0 when the store is closed.
func (s *Store) keys(name string) float64 {
	var n int
	_ = s.view(context.Background(), func(tx *bolt.Tx) error {
		n = bucket(tx, name).Stats().KeyN
		return nil
	})
	return float64(n)
}
