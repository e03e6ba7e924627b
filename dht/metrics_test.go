package dht

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
)

// TestMetrics counts a directory's provides and its provider lookups,
// found and not found.
func TestMetrics(t *testing.T) {
	m := line(t, 2)
	reg := prometheus.NewRegistry()
	h := newHost(t)
	d, err := New(h, WithLogger(testlog.New(t)), WithMetrics(reg),
		WithBootstrapPeers(peer.AddrInfo{ID: m.hosts[1].ID(), Addrs: m.hosts[1].Addrs()}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Bootstrap(ctx); err != nil {
		t.Fatal(err)
	}
	m.dirs[0].Advertise([]protocol.Capability{translate()})
	d.Advertise([]protocol.Capability{{Name: "interpret"}})

	count := func(op, outcome string) float64 {
		return testutil.ToFloat64(d.met.lookups.WithLabelValues(op, outcome))
	}
	wait.For(t, 15*time.Second, func() error {
		if count(opProvide, outcomeSuccess) < 1 {
			return errors.New("no provide counted")
		}
		return nil
	})
	wait.For(t, 15*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if len(collect(ctx, d, "translate", false)) == 0 {
			return errors.New("translate not found yet")
		}
		return nil
	})
	wait.For(t, 30*time.Second, func() error {
		if count(opFindProviders, outcomeSuccess) < 1 {
			return errors.New("the lookup that found a provider is not counted yet")
		}
		return nil
	})
	notFound := count(opFindProviders, outcomeNotFound)
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got := collect(ctx, d, "nothing-serves-this", false); len(got) != 0 {
		t.Fatalf("found %v", got)
	}
	wait.For(t, 30*time.Second, func() error {
		if got := count(opFindProviders, outcomeNotFound); got != notFound+1 {
			return fmt.Errorf("not_found lookups %v, want %v", got, notFound+1)
		}
		return nil
	})
	lookups := count(opFindProviders, outcomeSuccess) + count(opFindProviders, outcomeNotFound)
	if got := histogramCount(t, reg, "meshagent_dht_lookup_seconds", opFindProviders); got != lookups {
		t.Errorf("latency observations %v, lookups %v", got, lookups)
	}
}

// histogramCount reads the sample count of one op's histogram.
func histogramCount(t *testing.T, reg *prometheus.Registry, name, op string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					return float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return 0
}
