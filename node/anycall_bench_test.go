package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// BenchmarkCallAny measures CallAny's requests/s with 3 providers against
// 1, in the same run. Each provider runs at most 4 handlers at once and
// each takes 2 ms, as a service with real work would, so one provider
// saturates and the figure shows how far spreading the calls lifts it:
//
//	go test ./node -run '^$' -bench CallAny -count 3
//
// (the median of the three runs of each is the figure to quote).
func BenchmarkCallAny(b *testing.B) {
	for _, k := range []int{1, 3} {
		b.Run(fmt.Sprintf("providers=%d", k), func(b *testing.B) {
			lim := node.DefaultLimits()
			lim.RequestsPerSecond = 0 // measure the choice, not the limiter
			lim.MaxConcurrent = 4
			work := node.HandlerFunc(func(ctx context.Context, c *node.Call) (json.RawMessage, error) {
				t := time.NewTimer(2 * time.Millisecond) // the work
				defer t.Stop()
				select {
				case <-t.C:
				case <-ctx.Done():
					return nil, ctx.Err()
				}
				return json.RawMessage(`{}`), nil
			})
			caller := meshtest.Node(b, 0, node.WithLimits(lim))
			for i := range k {
				p := meshtest.Node(b, i+1, node.WithLimits(lim),
					node.WithServices(node.Service{Capability: protocol.Capability{Name: "work"}, Handler: work}))
				meshtest.Connect(b, caller, p)
			}
			b.SetParallelism(8) // more callers than one provider has handlers
			start := time.Now()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, _, err := caller.CallAny(b.Context(), protocol.CallRequest{Action: "work", Params: json.RawMessage(`{}`)}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		})
	}
}
