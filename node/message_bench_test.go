package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// The direct-message benchmark (seed 004: 10,000 messages a second, p99
// under 100 ms) sends seed-004-sized direct messages from one agent to
// another with the default limits (the per-requester rate limit
// included), from msgSenders concurrent senders, and runs the raw libp2p
// echo with the same concurrency and the same number of round trips in the
// same run for comparison:
//
//	go test ./node -run '^$' -bench DirectMessages -benchtime 5s
//
// Each sub-benchmark reports messages (or round trips) per second, p50
// and p99 latency, and CPU per message for both ends together. On a
// shared machine the absolute figures move with the load; the ratio to
// the raw echo and the CPU per message move much less.
const (
	msgSenders        = 64
	targetMessageRate = 10000
	targetMessageP99  = 100 * time.Millisecond
)

func benchMessage(i int) protocol.AgentMessage {
	return protocol.AgentMessage{
		MessageID: fmt.Sprintf("msg-%d-%d", time.Now().UnixNano(), i),
		Subject:   "Review request for auth module",
		Body:      "Can you review the authentication changes in src/auth.go?",
		Priority:  protocol.PriorityNormal,
		Context:   json.RawMessage(`{"action":"code_review","bead_id":"bead-xyz-789","files":["src/auth.go","src/auth_test.go"]}`),
	}
}

// runSenders runs n operations over msgSenders goroutines and returns
// their latencies and the wall time.
func runSenders(b *testing.B, n int, op func(w, i int) error) ([]time.Duration, time.Duration) {
	var (
		next atomic.Int64
		mu   sync.Mutex
		all  = make([]time.Duration, 0, n)
		wg   sync.WaitGroup
		fail atomic.Pointer[error]
	)
	start := time.Now()
	for w := range msgSenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := make([]time.Duration, 0, n/msgSenders+1)
			for {
				i := int(next.Add(1)) - 1
				if i >= n || fail.Load() != nil {
					break
				}
				t0 := time.Now()
				if err := op(w, i); err != nil {
					fail.Store(&err)
					break
				}
				d = append(d, time.Since(t0))
			}
			mu.Lock()
			all = append(all, d...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := fail.Load(); err != nil {
		b.Fatal(*err)
	}
	return all, time.Since(start)
}

type rateResult struct {
	rate     float64
	p50, p99 time.Duration
}

func reportRate(b *testing.B, d []time.Duration, elapsed time.Duration, unit string) rateResult {
	slices.Sort(d)
	r := rateResult{rate: float64(len(d)) / elapsed.Seconds(), p50: d[len(d)/2], p99: d[len(d)*99/100]}
	b.ReportMetric(r.rate, unit+"/s")
	b.ReportMetric(float64(r.p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(r.p99.Microseconds()), "p99-µs")
	return r
}

func BenchmarkDirectMessages(b *testing.B) {
	ctx := context.Background()
	var received atomic.Int64
	p := meshtest.Node(b, 2)
	p.OnMessage(func(context.Context, peer.ID, protocol.AgentMessage) (json.RawMessage, error) {
		received.Add(1)
		return nil, nil
	})
	a := meshtest.Node(b, 1)
	meshtest.Connect(b, a, p)
	p.Host().SetStreamHandler(echoProto, func(s network.Stream) {
		defer s.Close()
		fr := protocol.NewFrameReader(s, 0)
		for {
			f, err := fr.Next()
			if err != nil {
				return
			}
			if _, err := s.Write(protocol.AppendFrame(nil, f)); err != nil {
				return
			}
		}
	})
	var results sync.Map

	b.Run("raw-echo", func(b *testing.B) {
		// One stream per sender, frames the size of a signed message.
		payload := make([]byte, 700)
		clients := make([]func([]byte) error, msgSenders)
		for w := range clients {
			do, done := echoClient(b, a, p)
			defer done()
			clients[w] = do
		}
		b.ResetTimer()
		cpu := processCPU()
		d, elapsed := runSenders(b, b.N, func(w, _ int) error { return clients[w](payload) })
		reportCPU(b, cpu)
		results.Store("raw", reportRate(b, d, elapsed, "msgs"))
	})
	b.Run("signed-message", func(b *testing.B) {
		received.Store(0)
		r0, m0 := node.MessageBatches(a)
		cpu := processCPU()
		d, elapsed := runSenders(b, b.N, func(_, i int) error {
			_, err := a.SendMessage(ctx, p.AgentID(), benchMessage(i), 30*time.Second)
			return err
		})
		reportCPU(b, cpu)
		if got := received.Load(); got != int64(b.N) {
			b.Fatalf("%d messages handled, %d sent", got, b.N)
		}
		if r1, m1 := node.MessageBatches(a); r1 > r0 {
			b.ReportMetric(float64(m1-m0)/float64(r1-r0), "msgs/request")
		}
		results.Store("msg", reportRate(b, d, elapsed, "msgs"))
	})
	b.Run("signed-call", func(b *testing.B) {
		// Calls of the built-in agent.message one by one, without the
		// batching of SendMessage.
		cpu := processCPU()
		d, elapsed := runSenders(b, b.N, func(_, i int) error {
			params, _ := json.Marshal(benchMessage(i))
			_, err := a.Call(ctx, protocol.CallRequest{To: p.AgentID(), Action: protocol.MessageCapability, Params: params})
			return err
		})
		reportCPU(b, cpu)
		results.Store("call", reportRate(b, d, elapsed, "msgs"))
	})
	b.Cleanup(func() {
		raw, ok1 := results.Load("raw")
		msg, ok2 := results.Load("msg")
		if !ok1 || !ok2 {
			return
		}
		r, m := raw.(rateResult), msg.(rateResult)
		verdict := "met"
		if m.rate < targetMessageRate || m.p99 >= targetMessageP99 {
			verdict = "NOT met"
		}
		fmt.Fprintf(os.Stdout, "direct messages from one sender (%d concurrent): %.0f msgs/s p50 %v p99 %v | raw echo %.0f round trips/s p99 %v | %.2fx raw | target ≥%d/s p99 <%v: %s",
			msgSenders, m.rate, m.p50.Round(time.Microsecond), m.p99.Round(time.Microsecond), r.rate, r.p99.Round(time.Microsecond), m.rate/r.rate, targetMessageRate, targetMessageP99, verdict)
		if c, ok := results.Load("call"); ok {
			c := c.(rateResult)
			fmt.Fprintf(os.Stdout, " | unbatched signed calls %.0f/s p99 %v", c.rate, c.p99.Round(time.Microsecond))
		}
		fmt.Fprintln(os.Stdout)
	})
}

// BenchmarkSignedCallAudit is the audit log's cost: CPU per serial signed
// call (both ends) without and with both ends recording (WithAudit):
//
//	go test ./node -run '^$' -bench SignedCallAudit -benchtime 20000x -count 3
func BenchmarkSignedCallAudit(b *testing.B) {
	payload := benchPayload()
	for _, audited := range []bool{false, true} {
		name := "off"
		if audited {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			lim := node.DefaultLimits()
			lim.RequestsPerSecond = 0
			popts := []node.Option{node.WithLimits(lim), node.WithServices(echoService("echo"))}
			aopts := []node.Option{node.WithLimits(lim)}
			if audited {
				popts = append(popts, node.WithStore(auditStore(b)), node.WithAudit(false))
				aopts = append(aopts, node.WithStore(auditStore(b)), node.WithAudit(false))
			}
			p := meshtest.Node(b, 2, popts...)
			a := meshtest.Node(b, 1, aopts...)
			meshtest.Connect(b, a, p)
			ctx := context.Background()
			b.ResetTimer()
			cpu := processCPU()
			for b.Loop() {
				if _, err := a.Call(ctx, protocol.CallRequest{To: p.AgentID(), Action: "echo", Params: payload}); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
		})
	}
}
