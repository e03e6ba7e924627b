package node_test

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// The request/response benchmark runs a raw libp2p stream echo and a signed
// meshagent call between the same two in-process nodes over TCP loopback,
// with the same 1 KiB payload, so the ratio between them is the figure that
// matters (absolute timings on a shared machine are noisy):
//
//	go test ./node -run '^$' -bench RequestResponse -benchtime 3s
//
// Each sub-benchmark reports p50/p99 latency in µs and requests/s.

const echoProto = "/meshagent-bench/echo/1"

// The signed call's targets, printed beside the measured figures.
const (
	targetP50Ratio   = 6.0
	targetSignedRate = 15000
)

var benchResults sync.Map // name -> [3]float64{p50, p99, rps}

func benchPayload() json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"text":%q}`, strings.Repeat("a", 1024-11)))
}

func benchNodes(b *testing.B) (a, p *node.Node) {
	lim := node.DefaultLimits()
	lim.RequestsPerSecond = 0 // measure the pipeline, not the limiter
	p = meshtest.Node(b, 2, node.WithLimits(lim), node.WithServices(echoService("echo")))
	a = meshtest.Node(b, 1, node.WithLimits(lim))
	meshtest.Connect(b, a, p)
	// Raw echo: length-prefixed frames echoed back on a long-lived stream,
	// the same shape as meshagent's request stream minus signing and JSON.
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
	return a, p
}

// benchSigner is a signer with meshtest's key i.
func benchSigner(b *testing.B, i int) *sign.Signer {
	s, err := sign.NewSigner(meshtest.Key(b, i))
	if err != nil {
		b.Fatal(err)
	}
	return s
}

type latencies struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *latencies) add(d []time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d...)
	l.mu.Unlock()
}

func (l *latencies) report(b *testing.B, name string, elapsed time.Duration) {
	if len(l.d) == 0 {
		return
	}
	slices.Sort(l.d)
	p50 := l.d[len(l.d)/2]
	p99 := l.d[len(l.d)*99/100]
	rps := float64(len(l.d)) / elapsed.Seconds()
	b.ReportMetric(float64(p50.Microseconds()), "p50-µs")
	b.ReportMetric(float64(p99.Microseconds()), "p99-µs")
	b.ReportMetric(rps, "req/s")
	benchResults.Store(name, [3]float64{float64(p50.Microseconds()), float64(p99.Microseconds()), rps})
}

// reportCPU reports the process's CPU time per operation since cpu: both
// ends of the call, the runtime's garbage collection included. Unlike
// latency it moves little when other work shares the machine, which makes
// it the figure to compare changes by.
func reportCPU(b *testing.B, cpu time.Duration) {
	if cpu := processCPU() - cpu; cpu > 0 {
		b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e3, "cpu-µs/op")
	}
}

// echoClient is one caller's stream for the raw echo.
func echoClient(b *testing.B, a, p *node.Node) (func([]byte) error, func()) {
	s, err := a.Host().NewStream(meshtest.Context(b, time.Minute), p.ID(), echoProto)
	if err != nil {
		b.Fatal(err)
	}
	fr := protocol.NewFrameReader(s, 0)
	frame := protocol.AppendFrame(nil, nil)
	return func(payload []byte) error {
			frame = protocol.AppendFrame(frame[:0], payload)
			if _, err := s.Write(frame); err != nil {
				return err
			}
			got, err := fr.Next()
			if err != nil {
				return err
			}
			if len(got) != len(payload) {
				return io.ErrShortBuffer
			}
			return nil
		}, func() {
			_ = s.Close()
		}
}

func BenchmarkRequestResponse(b *testing.B) {
	a, p := benchNodes(b)
	payload := benchPayload()
	signed := func() error {
		resp, err := a.Call(b.Context(), protocol.CallRequest{To: p.AgentID(), Action: "echo", Params: payload})
		if err == nil && len(resp.Result) != len(payload) {
			err = fmt.Errorf("echo returned %d bytes", len(resp.Result))
		}
		return err
	}

	b.Run("serial/raw-echo", func(b *testing.B) {
		do, done := echoClient(b, a, p)
		defer done()
		var l latencies
		d := make([]time.Duration, 0, b.N)
		start, cpu := time.Now(), processCPU()
		for b.Loop() {
			t0 := time.Now()
			if err := do(payload); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(t0))
		}
		reportCPU(b, cpu)
		l.add(d)
		l.report(b, "serial/raw-echo", time.Since(start))
	})
	// What Ed25519 alone costs a serial call: the requester signs, the
	// provider verifies, the provider signs its response and the requester
	// verifies it, one after another, through the same sign functions the
	// envelopes use. No implementation of the protocol answers faster, so
	// when this is above the target ratio the target is out of reach on
	// this machine (printComparison says so).
	b.Run("serial/signatures", func(b *testing.B) {
		requester, provider := benchSigner(b, 1), benchSigner(b, 2)
		var l latencies
		d := make([]time.Duration, 0, b.N)
		start := time.Now()
		for b.Loop() {
			t0 := time.Now()
			for _, s := range []*sign.Signer{requester, provider} {
				if err := sign.Verify(s.ID(), payload, s.Sign(payload)); err != nil {
					b.Fatal(err)
				}
			}
			d = append(d, time.Since(t0))
		}
		l.add(d)
		l.report(b, "serial/signatures", time.Since(start))
	})
	b.Run("serial/signed-call", func(b *testing.B) {
		var l latencies
		d := make([]time.Duration, 0, b.N)
		start, cpu := time.Now(), processCPU()
		for b.Loop() {
			t0 := time.Now()
			if err := signed(); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(t0))
		}
		reportCPU(b, cpu)
		l.add(d)
		l.report(b, "serial/signed-call", time.Since(start))
	})
	// Concurrent callers: 64 goroutines. The raw echo gets one stream per
	// goroutine; meshagent multiplexes all calls on one stream per peer.
	b.Run("parallel/raw-echo", func(b *testing.B) {
		var l latencies
		b.SetParallelism(32) // × GOMAXPROCS goroutines
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			do, done := echoClient(b, a, p)
			defer done()
			var d []time.Duration
			for pb.Next() {
				t0 := time.Now()
				if err := do(payload); err != nil {
					b.Error(err)
					return
				}
				d = append(d, time.Since(t0))
			}
			l.add(d)
		})
		l.report(b, "parallel/raw-echo", time.Since(start))
	})
	b.Run("parallel/signed-call", func(b *testing.B) {
		var l latencies
		b.SetParallelism(32)
		start := time.Now()
		b.RunParallel(func(pb *testing.PB) {
			var d []time.Duration
			for pb.Next() {
				t0 := time.Now()
				if err := signed(); err != nil {
					b.Error(err)
					return
				}
				d = append(d, time.Since(t0))
			}
			l.add(d)
		})
		l.report(b, "parallel/signed-call", time.Since(start))
	})
	b.Cleanup(func() { printComparison(b) })
}

func printComparison(b *testing.B) {
	get := func(k string) ([3]float64, bool) {
		v, ok := benchResults.Load(k)
		if !ok {
			return [3]float64{}, false
		}
		return v.([3]float64), true
	}
	for _, mode := range []string{"serial", "parallel"} {
		raw, ok1 := get(mode + "/raw-echo")
		sig, ok2 := get(mode + "/signed-call")
		if !ok1 || !ok2 || raw[0] == 0 {
			continue
		}
		fmt.Fprintf(os.Stdout, "%-8s raw echo p50 %6.0fµs p99 %6.0fµs %8.0f req/s | signed call p50 %6.0fµs p99 %6.0fµs %8.0f req/s | p50 ratio %.2fx",
			mode, raw[0], raw[1], raw[2], sig[0], sig[1], sig[2], sig[0]/raw[0])
		// The targets (issue "Performance and scale"): a serial call's p50
		// within 6× the raw echo's, and 15,000 signed calls/s from 64
		// concurrent callers.
		if mode == "serial" {
			fmt.Fprintf(os.Stdout, " (target ≤%gx)", targetP50Ratio)
			if floor, ok := get("serial/signatures"); ok {
				ratio := floor[0] / raw[0]
				fmt.Fprintf(os.Stdout, "\n%-8s two signatures and two verifications alone p50 %6.0fµs = %.2fx the echo", "", floor[0], ratio)
				if ratio >= targetP50Ratio {
					fmt.Fprintf(os.Stdout, ": the target is below this machine's floor")
				}
			}
		} else {
			fmt.Fprintf(os.Stdout, " | signed calls/s %.0f (target ≥%d)", sig[2], targetSignedRate)
			if floor, ok := get("serial/signatures"); ok {
				// Every core signing and verifying, nothing else: the most
				// calls/s this machine's Ed25519 allows.
				fmt.Fprintf(os.Stdout, "\n%-8s signatures alone allow at most %.0f calls/s on %d cores", "", floor[2]*float64(runtime.GOMAXPROCS(0)), runtime.GOMAXPROCS(0))
			}
		}
		fmt.Fprintln(os.Stdout)
	}
}
