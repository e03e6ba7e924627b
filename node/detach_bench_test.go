package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// BenchmarkSubmit compares a detached submission (Submit: returns once
// the provider recorded the task on disk; the requester records it too)
// with the same request made synchronously (Call), between the same two
// in-process nodes with stores, in the same run, 8 requests in flight:
//
//	go test ./node -run '^$' -bench Submit -benchtime 2000x
//
// It prints p50/p99 of submit-to-accepted and of the call, the rates of
// both, and the provider's disk bytes per finished task (its records'
// bytes, and the growth of its store file, over the tasks).
func BenchmarkSubmit(b *testing.B) {
	lim := node.DefaultLimits()
	lim.RequestsPerSecond = 0
	dir := b.TempDir()
	pst, err := store.Open(filepath.Join(dir, "p.db"), store.WithPruneInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = pst.Close() })
	rst, err := store.Open(filepath.Join(dir, "r.db"), store.WithPruneInterval(0))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = rst.Close() })
	bounds := store.TaskBounds{PerRequester: 1 << 20, Total: 1 << 20, Bytes: 1 << 40}
	p := meshtest.Node(b, 2, node.WithLimits(lim), node.WithStore(pst), node.WithTaskBounds(bounds), node.WithServices(echoService("echo")))
	r := meshtest.Node(b, 1, node.WithLimits(lim), node.WithStore(rst), node.WithTaskBounds(bounds))
	meshtest.Connect(b, r, p)
	params := json.RawMessage(`{"text":"review this change please"}`)
	ctx := context.Background()

	run := func(n int, one func() error) (lat []time.Duration, rate float64) {
		const inFlight = 8
		lat = make([]time.Duration, n)
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range inFlight {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
					t0 := time.Now()
					if err := one(); err != nil {
						b.Error(err)
						return
					}
					lat[i] = time.Since(t0)
				}
			})
		}
		wg.Wait()
		rate = float64(n) / time.Since(start).Seconds()
		slices.Sort(lat)
		return lat, rate
	}
	pct := func(lat []time.Duration, q float64) float64 {
		return float64(lat[min(len(lat)-1, int(float64(len(lat))*q))].Microseconds())
	}
	fileSize := func() int64 {
		fi, err := os.Stat(pst.Path())
		if err != nil {
			b.Fatal(err)
		}
		return fi.Size()
	}

	n := max(b.N, 50)
	b.ResetTimer()
	callLat, callRate := run(n, func() error {
		_, err := r.Call(ctx, protocol.CallRequest{To: p.AgentID(), Action: "echo", Params: params})
		return err
	})
	size0 := fileSize()
	var ids sync.Map
	subLat, subRate := run(n, func() error {
		sub, err := r.Submit(ctx, protocol.CallRequest{To: p.AgentID(), Action: "echo", Params: params}, time.Hour)
		if err == nil {
			ids.Store(sub.TaskID, true)
		}
		return err
	})
	b.StopTimer()
	// Every task finished: its record holds its answer.
	wait.For(b, 2*time.Minute, func() error {
		done := 0
		if err := pst.Tasks(ctx, func(rec store.TaskRecord) bool {
			if rec.Final {
				done++
			}
			return true
		}); err != nil {
			return err
		}
		if done < n {
			return fmt.Errorf("%d of %d tasks finished", done, n)
		}
		return nil
	})
	count, recBytes, err := pst.TaskUsage(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(pct(subLat, 0.5), "submit-p50-µs")
	b.ReportMetric(pct(subLat, 0.99), "submit-p99-µs")
	b.ReportMetric(subRate, "submits/s")
	b.ReportMetric(pct(callLat, 0.5), "call-p50-µs")
	b.ReportMetric(pct(callLat, 0.99), "call-p99-µs")
	b.ReportMetric(callRate, "calls/s")
	b.ReportMetric(float64(recBytes)/float64(count), "record-B/task")
	b.ReportMetric(float64(fileSize()-size0)/float64(count), "file-B/task")
	fmt.Printf("submit: p50 %.0f µs p99 %.0f µs, %.0f/s; call: p50 %.0f µs p99 %.0f µs, %.0f/s; %d tasks, %.0f record bytes and %.0f file bytes each\n",
		pct(subLat, 0.5), pct(subLat, 0.99), subRate, pct(callLat, 0.5), pct(callLat, 0.99), callRate, count,
		float64(recBytes)/float64(count), float64(fileSize()-size0)/float64(count))
}
