package pubsub

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
)

const fanout = 20

type fanoutResult struct {
	p50, p99 time.Duration
	perSec   float64
}

// deliveries counts messages received over all subscribers and wakes a
// waiter on every delivery, so the benchmark waits on deliveries rather
// than polling for them.
type deliveries struct {
	n      atomic.Int64
	notify chan struct{} // buffered 1
}

func newDeliveries() *deliveries { return &deliveries{notify: make(chan struct{}, 1)} }

func (d *deliveries) add() {
	d.n.Add(1)
	select {
	case d.notify <- struct{}{}:
	default:
	}
}

func (d *deliveries) Load() int64 { return d.n.Load() }

func (d *deliveries) Store(v int64) { d.n.Store(v) }

// measure runs publish rounds: latency until the last of the subscribers
// has a message (one at a time), then a burst for throughput. received
// counts deliveries over all subscribers.
func measure(b *testing.B, name string, rounds, burst int, publish func(i int) error, received *deliveries) fanoutResult {
	b.Helper()
	wait := func(want int64) {
		deadline := time.NewTimer(30 * time.Second)
		defer deadline.Stop()
		for received.Load() < want {
			select {
			case <-received.notify:
			case <-deadline.C:
				b.Fatalf("%s: deliveries %d, want %d", name, received.Load(), want)
			}
		}
	}
	var lat []time.Duration
	for i := range rounds {
		want := received.Load() + fanout
		start := time.Now()
		if err := publish(i); err != nil {
			b.Fatal(err)
		}
		wait(want)
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	// Sustained rate with at most window messages in flight, since
	// GossipSub drops on full peer queues rather than pushing back.
	const window = 8
	base := received.Load()
	want := base + int64(burst*fanout)
	start := time.Now()
	for i := range burst {
		if i >= window {
			wait(base + int64((i-window)*fanout))
		}
		if err := publish(rounds + i); err != nil {
			b.Fatal(err)
		}
	}
	wait(want)
	return fanoutResult{p50: lat[len(lat)/2], p99: lat[len(lat)*99/100], perSec: float64(burst) / time.Since(start).Seconds()}
}

func star(b *testing.B) []host.Host {
	hosts := make([]host.Host, fanout+1)
	for i := range hosts {
		hosts[i] = newHost(b)
	}
	for i, h := range hosts[1:] {
		connect(b, hosts[0], h)
		connect(b, h, hosts[1+(i+1)%fanout])
	}
	return hosts
}

// BenchmarkFanout: one publisher connected to twenty subscribers, which
// are also connected in a ring, on 127.0.0.1. The bus (envelope signature, StrictNoSign) and raw
// go-libp2p-pubsub with its default signing run on two host sets of the
// same shape in the same run.
func BenchmarkFanout(b *testing.B) {
	rounds, burst := max(b.N, 100), 500
	ctx := context.Background()

	hosts := star(b)
	buses := make([]*Bus, len(hosts))
	for i, h := range hosts {
		buses[i] = newBus(b, h)
	}
	got := newDeliveries()
	for _, bus := range buses[1:] {
		if _, err := bus.Subscribe("bench:*", func(Message) { got.add() }); err != nil {
			b.Fatal(err)
		}
	}
	for _, bus := range buses[1:] {
		waitFor(b, 20*time.Second, "mesh", func() bool { return bus.MeshPeers("bench:") >= 2 })
	}
	waitFor(b, 20*time.Second, "publisher topic peers", func() bool {
		_, _ = buses[0].Publish(ctx, "bench:warm", payload("w"), WithWait(time.Millisecond))
		return len(buses[0].Peers("bench:")) >= fanout
	})
	waitFor(b, 20*time.Second, "warm-up", func() bool { return got.Load() >= fanout })
	got.Store(0)
	b.ResetTimer()
	ours := measure(b, "bus", rounds, burst, func(i int) error {
		_, err := buses[0].Publish(ctx, "bench:x", payload(fmt.Sprint(i)), WithAtLeast(fanout))
		return err
	}, got)
	b.StopTimer()

	rhosts := star(b)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	topics := make([]*libp2ppubsub.Topic, len(rhosts))
	meshes := make([]*meshTracer, len(rhosts))
	rgot := newDeliveries()
	for i, h := range rhosts {
		meshes[i] = newMeshTracer()
		ps, err := libp2ppubsub.NewGossipSub(rctx, h, libp2ppubsub.WithRawTracer(meshes[i]))
		if err != nil {
			b.Fatal(err)
		}
		if topics[i], err = ps.Join("bench"); err != nil {
			b.Fatal(err)
		}
		if i == 0 {
			continue
		}
		sub, err := topics[i].Subscribe()
		if err != nil {
			b.Fatal(err)
		}
		go func() {
			for {
				if _, err := sub.Next(rctx); err != nil {
					return
				}
				rgot.add()
			}
		}()
	}
	for _, m := range meshes[1:] {
		waitFor(b, 20*time.Second, "raw mesh", func() bool { return m.count("bench") >= 2 })
	}
	waitFor(b, 20*time.Second, "raw topic peers", func() bool { return len(topics[0].ListPeers()) >= fanout })
	raw := measure(b, "raw", rounds, burst, func(i int) error {
		return topics[0].Publish(rctx, []byte(fmt.Sprintf(`{"m":"%d"}`, i)))
	}, rgot)

	b.ReportMetric(float64(ours.p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(ours.p99.Microseconds()), "p99-µs")
	b.ReportMetric(ours.perSec, "msgs/s")
	b.ReportMetric(float64(raw.p50.Microseconds()), "raw-p50-µs")
	b.ReportMetric(float64(raw.p99.Microseconds()), "raw-p99-µs")
	b.ReportMetric(raw.perSec, "raw-msgs/s")
	b.Logf("bus: p50 %s p99 %s %.0f msg/s; raw: p50 %s p99 %s %.0f msg/s; throughput ratio bus/raw %.2f",
		ours.p50, ours.p99, ours.perSec, raw.p50, raw.p99, raw.perSec, ours.perSec/raw.perSec)
	for _, t := range topics {
		_ = t.Close()
	}
}
