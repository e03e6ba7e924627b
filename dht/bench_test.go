package dht

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
)

// BenchmarkFindProviders times a full Directory.Find (lookup, dedup and a
// trivial confirm) against the raw kad-dht FindProvidersAsync on the same
// 20-node network, and reports the p50/p99 of both and their ratio.
func BenchmarkFindProviders(b *testing.B) {
	m := line(b, 20)
	want := map[peer.ID]bool{}
	for _, i := range []int{3, 10, 17} {
		m.dirs[i].Advertise([]protocol.Capability{translate()})
		want[m.hosts[i].ID()] = true
	}
	wait.For(b, 15*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return sameIDs(collect(ctx, m.dirs[0], "translate", false), want)
	})
	confirm := func(context.Context, peer.AddrInfo) ([]protocol.Capability, error) {
		return []protocol.Capability{translate()}, nil
	}
	key := CapabilityKey("translate")
	var dirT, rawT []time.Duration
	for i := 0; b.Loop(); i++ {
		d := m.dirs[i%len(m.dirs)]
		start := time.Now()
		for range d.Find(context.Background(), "translate", false, confirm) {
		}
		dirT = append(dirT, time.Since(start))

		start = time.Now()
		for range d.Kad().FindProvidersAsync(context.Background(), key, 0) {
		}
		rawT = append(rawT, time.Since(start))
	}
	dp50, dp99 := quantiles(dirT)
	rp50, rp99 := quantiles(rawT)
	b.ReportMetric(float64(dp50.Microseconds()), "find-p50-µs")
	b.ReportMetric(float64(dp99.Microseconds()), "find-p99-µs")
	b.ReportMetric(float64(rp50.Microseconds()), "raw-p50-µs")
	b.ReportMetric(float64(rp99.Microseconds()), "raw-p99-µs")
	if rp50 > 0 {
		b.ReportMetric(float64(dp50)/float64(rp50), "p50-ratio")
	}
}

func quantiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2], s[(len(s)*99)/100]
}
