//go:build unix

package bus_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/rpc"
)

// The bus at scale: TestThousandClients (part of every run) has 1,000
// WebSocket clients each receive and acknowledge a message on its own
// topic; BenchmarkIdleClients measures what an idle client costs the
// server. The file is unix-only because both need RLIMIT_NOFILE.

// scaleClients is how many clients TestThousandClients connects.
const scaleClients = 1000

// dialParallel bounds the clients dialling at once, so that the
// listener's accept backlog never overflows (an overflow costs a SYN
// retransmission, a second or more).
const dialParallel = 32

// raiseFDLimit makes sure this process may hold n file descriptors,
// raising the soft RLIMIT_NOFILE up to the hard one if needed (Go raises
// it at start-up on Linux, not everywhere). It skips tb if the hard limit
// is too low.
func raiseFDLimit(tb testing.TB, n uint64) {
	tb.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Fatalf("getrlimit: %v", err)
	}
	if uint64(lim.Cur) >= n {
		return
	}
	if uint64(lim.Max) < n {
		tb.Skipf("needs %d file descriptors; RLIMIT_NOFILE hard limit is %d", n, lim.Max)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		tb.Skipf("needs %d file descriptors; raising RLIMIT_NOFILE to %d: %v", n, lim.Max, err)
	}
}

// forEach runs f(i) for i in [0, n) on at most par goroutines and returns
// the first error.
func forEach(n, par int, f func(i int) error) error {
	var (
		next  atomic.Int64
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	for range min(par, n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return first
}

// scaleServer starts a bus (fake mesh, no store unless opts give one) on
// a loopback port that admits max clients.
func scaleServer(tb testing.TB, max int, opts ...rpctest.Option) *rpctest.Stack {
	tb.Helper()
	lim := rpc.DefaultLimits()
	lim.MaxClients = max
	srv, err := newStack(tb, fakemesh.New(), append([]rpctest.Option{rpctest.WithRPC(rpc.WithLimits(lim))}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := srv.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
	})
	return srv
}

// busJoin initializes c as clientID and subscribes it to topic.
func busJoin(ctx context.Context, c *rpc.Client, clientID, topic string) error {
	if err := c.Call(ctx, rpc.MethodInitialize, rpc.InitializeParams{ClientID: clientID, ClientInfo: rpc.ClientInfo{Name: "scale", Version: "1"}}, nil); err != nil {
		return fmt.Errorf("initialize %s: %w", clientID, err)
	}
	var ok bus.SuccessResult
	if err := c.Call(ctx, bus.MethodSubscribe, map[string]string{"topic": topic}, &ok); err != nil {
		return fmt.Errorf("subscribe %s to %s: %w", clientID, topic, err)
	}
	if !ok.Success {
		return fmt.Errorf("subscribe %s to %s: success false", clientID, topic)
	}
	return nil
}

// closeAll closes clients in parallel (each Close waits for the closing
// handshake).
func closeAll(clients []*rpc.Client) {
	_ = forEach(len(clients), dialParallel, func(i int) error {
		if clients[i] != nil {
			_ = clients[i].Close()
		}
		return nil
	})
}

func scaleID(i int) string    { return fmt.Sprintf("scale-%04d", i) }
func scaleTopic(i int) string { return fmt.Sprintf("scale:%04d", i) }

// TestThousandClients: 1,000 concurrent clients on one bus, each
// initialized and subscribed to its own topic. Every client then sends
// one message to the next client's topic, all at once. Every sendMessage
// must come back with exactly one ack, processed, from the topic's owner,
// and every client must have received exactly one processMessage: the
// one its predecessor sent, on its own topic.
func TestThousandClients(t *testing.T) {
	const n = scaleClients
	raiseFDLimit(t, 2*n+256) // both ends of every connection live here
	srv := scaleServer(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	type received struct {
		mu  sync.Mutex
		got []bus.ProcessParams
	}
	recv := make([]*received, n)
	clients := make([]*rpc.Client, n)
	defer closeAll(clients) // before the server's Close (a cleanup)
	start := time.Now()
	err := forEach(n, dialParallel, func(i int) error {
		r := &received{}
		recv[i] = r
		c, err := rpc.Dial(ctx, srv.URL(), rpc.WithoutInitialize(), rpc.WithRequestHandler(func(_ context.Context, method string, params json.RawMessage) (any, error) {
			if method != bus.MethodProcessMessage {
				return nil, rpc.Errorf(rpc.CodeMethodNotFound, "method not found: %s", method)
			}
			var p bus.ProcessParams
			if err := json.Unmarshal(params, &p); err != nil {
				return nil, err
			}
			r.mu.Lock()
			r.got = append(r.got, p)
			r.mu.Unlock()
			return bus.ProcessResult{Processed: true, Message: "ok " + scaleID(i)}, nil
		}))
		if err != nil {
			return fmt.Errorf("dial client %d: %w", i, err)
		}
		clients[i] = c
		return busJoin(ctx, c, scaleID(i), scaleTopic(i))
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.Clients(); got != n {
		t.Fatalf("server holds %d clients, want %d", got, n)
	}
	joined := time.Since(start)

	// All sends at once: each waits for its recipient's processMessage.
	results := make([]bus.SendResult, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start = time.Now()
	for i := range n {
		wg.Go(func() {
			to := (i + 1) % n
			payload := map[string]string{"type": "plaintext_message", "text": "from " + scaleID(i), "to": scaleID(to)}
			errs[i] = clients[i].Call(ctx, bus.MethodSendMessage, map[string]any{"topic": scaleTopic(to), "payload": payload}, &results[i])
		})
	}
	wg.Wait()
	sent := time.Since(start)
	t.Logf("%d clients: connected, initialized and subscribed in %v; %d messages sent and acked in %v", n, joined.Round(time.Millisecond), n, sent.Round(time.Millisecond))

	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 10 {
			t.Errorf(format, args...)
		}
	}
	for i := range n {
		to := (i + 1) % n
		res := results[i]
		switch {
		case errs[i] != nil:
			report("client %d: sendMessage: %v", i, errs[i])
		case !res.Success || len(res.Acks) != 1:
			report("client %d: sendMessage to %s: %+v, want success and one ack", i, scaleTopic(to), res)
		case res.Acks[0] != bus.Ack{ClientID: scaleID(to), Processed: true, Message: "ok " + scaleID(to)}:
			report("client %d: ack %+v, want processed by %s", i, res.Acks[0], scaleID(to))
		}
	}
	for i := range n {
		from := (i + n - 1) % n
		recv[i].mu.Lock()
		got := recv[i].got
		recv[i].mu.Unlock()
		if len(got) != 1 {
			report("client %d received %d messages, want 1: %+v", i, len(got), got)
			continue
		}
		var p struct{ Text, To string }
		if err := json.Unmarshal(got[0].Payload, &p); err != nil {
			report("client %d: payload %s: %v", i, got[0].Payload, err)
			continue
		}
		if got[0].Topic != scaleTopic(i) || p.Text != "from "+scaleID(from) || p.To != scaleID(i) {
			report("client %d received %q %s, want %q from %s", i, got[0].Topic, got[0].Payload, scaleTopic(i), scaleID(from))
		}
	}
	if bad > 10 {
		t.Errorf("... %d failures in all", bad)
	}

	// Disconnecting every client leaves the server with none (and the
	// package's goleak check finds no goroutine left once it closes).
	closeAll(clients)
	wait.For(t, 30*time.Second, func() error {
		if c := srv.Clients(); c != 0 {
			return fmt.Errorf("server still holds %d clients", c)
		}
		return nil
	})
}

// Environment of the client process BenchmarkIdleClients starts.
const (
	idleEnvURL     = "MESHAGENT_IDLE_CHILD_URL"
	idleEnvClients = "MESHAGENT_IDLE_CHILD_CLIENTS"
	// idleEnvProfile, if set when the benchmark runs, names a file to
	// write the server's heap profile to while every client is idle.
	idleEnvProfile = "MESHAGENT_IDLE_HEAPPROFILE"
	// idleEnvCount overrides the number of clients (default 10,000).
	idleEnvCount = "MESHAGENT_IDLE_CLIENTS"
	idleReady    = "IDLE-CLIENTS-READY"
)

// BenchmarkIdleClients measures the server-side memory of idle bus
// clients: 10,000 WebSocket clients (MESHAGENT_IDLE_CLIENTS overrides)
// connect, initialize and subscribe to one topic each, then do nothing.
//
// The clients run in a child process (this test binary again, running
// TestIdleClientsChild), so that the measurement holds only the server
// side and each process stays within RLIMIT_NOFILE. With every client
// idle, after two GCs, the benchmark reports per client the growth of
// HeapInuse+StackInuse since before the clients came (B/client, the
// figure to keep under 50 KiB), of live heap bytes (live-B/client), of
// stack bytes (stack-B/client) and of goroutines (goroutines/client).
// Each iteration connects a fresh set of clients; run it with
// -benchtime 1x:
//
//	go test ./relay -run '^$' -bench IdleClients -benchtime 1x -count 3
//
// MESHAGENT_IDLE_HEAPPROFILE=heap.out writes the server's heap profile
// while the clients are idle, for go tool pprof.
func BenchmarkIdleClients(b *testing.B) {
	n := 10_000
	if s := os.Getenv(idleEnvCount); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			b.Fatalf("%s=%q: want a positive number", idleEnvCount, s)
		}
		n = v
	}
	raiseFDLimit(b, uint64(n)+256)
	var total, live, stack, gor float64
	for i := range b.N {
		m := measureIdle(b, n, i == 0)
		total += m.total
		live += m.live
		stack += m.stack
		gor += m.goroutines
	}
	f := float64(b.N)
	b.ReportMetric(total/f, "B/client")
	b.ReportMetric(live/f, "live-B/client")
	b.ReportMetric(stack/f, "stack-B/client")
	b.ReportMetric(gor/f, "goroutines/client")
	b.ReportMetric(0, "ns/op") // the time is the clients' dialling, not the server's cost
}

type idleFigures struct{ total, live, stack, goroutines float64 }

// measureIdle serves n idle clients from a child process and returns the
// server's growth per client.
func measureIdle(b *testing.B, n int, profile bool) idleFigures {
	b.StopTimer()
	srv := newIdleServer(b, n)
	defer func() { _ = srv.Close() }()

	var before, after runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()

	b.StartTimer()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestIdleClientsChild$", "-test.count", "1")
	cmd.Env = append(os.Environ(), idleEnvURL+"="+srv.URL(), idleEnvClients+"="+strconv.Itoa(n))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := false
	defer func() {
		if !exited {
			_ = stdin.Close()
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	var out []string
	lines := bufio.NewScanner(stdout)
	ready := false
	for !ready && lines.Scan() {
		out = append(out, lines.Text())
		ready = lines.Text() == idleReady
	}
	if !ready {
		b.Fatalf("client process ended before its clients were ready:\n%s", strings.Join(out, "\n"))
	}
	go func() { _, _ = io.Copy(io.Discard, stdout) }()
	b.StopTimer()
	// The child saw every subscribe answered, so the server has registered
	// every client; wait anyway in case a connection is still being torn
	// down from an earlier iteration.
	if err := wait.Until(30*time.Second, func() error {
		if c := srv.Clients(); c != n {
			return fmt.Errorf("server holds %d clients, want %d", c, n)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}

	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	g1 := runtime.NumGoroutine()
	if p := os.Getenv(idleEnvProfile); p != "" && profile {
		writeHeapProfile(b, p)
	}

	// Let the child close its clients and end.
	_ = stdin.Close()
	err = cmd.Wait()
	exited = true
	if err != nil {
		b.Fatalf("client process: %v", err)
	}
	per := func(a, z uint64) float64 { return (float64(z) - float64(a)) / float64(n) }
	fig := idleFigures{
		total:      per(before.HeapInuse+before.StackInuse, after.HeapInuse+after.StackInuse),
		live:       per(before.HeapAlloc, after.HeapAlloc),
		stack:      per(before.StackInuse, after.StackInuse),
		goroutines: float64(g1-g0) / float64(n),
	}
	b.Logf("%d idle clients: %.0f B/client (HeapInuse+StackInuse), live heap %.0f B/client, stacks %.0f B/client, %.2f goroutines/client",
		n, fig.total, fig.live, fig.stack, fig.goroutines)
	return fig
}

// newIdleServer is scaleServer for a benchmark iteration, closed by the
// caller rather than at the end of the benchmark.
func newIdleServer(b *testing.B, n int) *rpctest.Stack {
	lim := rpc.DefaultLimits()
	lim.MaxClients = n
	srv, err := newStack(b, fakemesh.New(), rpctest.WithRPC(rpc.WithLimits(lim)))
	if err != nil {
		b.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		_ = srv.Close()
		b.Fatal(err)
	}
	return srv
}

func writeHeapProfile(tb testing.TB, path string) {
	tb.Helper()
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		tb.Fatal(err)
	}
	if err := f.Close(); err != nil {
		tb.Fatal(err)
	}
}

// TestIdleClientsChild is the client process of BenchmarkIdleClients; it
// skips unless that benchmark started it. It connects the clients,
// initializes each and subscribes it to its own topic, prints the ready
// line, and keeps them idle until its stdin ends.
func TestIdleClientsChild(t *testing.T) {
	url := os.Getenv(idleEnvURL)
	if url == "" {
		t.Skip("the client process of BenchmarkIdleClients")
	}
	n, err := strconv.Atoi(os.Getenv(idleEnvClients))
	if err != nil || n < 1 {
		t.Fatalf("%s: want a positive number: %v", idleEnvClients, err)
	}
	raiseFDLimit(t, uint64(n)+256)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	clients := make([]*rpc.Client, n)
	defer closeAll(clients)
	err = forEach(n, dialParallel, func(i int) error {
		c, err := rpc.Dial(ctx, url, rpc.WithoutInitialize())
		if err != nil {
			return fmt.Errorf("dial client %d: %w", i, err)
		}
		clients[i] = c
		return busJoin(ctx, c, fmt.Sprintf("idle-%05d", i), fmt.Sprintf("idle:%05d", i))
	})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(idleReady)
	// Wait for the parent to close our stdin (EOF) or go away.
	if _, err := io.Copy(io.Discard, os.Stdin); err != nil && !errors.Is(err, os.ErrClosed) {
		t.Logf("stdin: %v", err)
	}
	for i, c := range clients {
		if err := c.Err(); err != nil {
			t.Errorf("client %d lost its connection while idle: %v", i, err)
			break
		}
	}
}
