//go:build linux

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/rpc"
)

// benchServer is the meshagent binary BenchmarkBusServerCPU measures
// (default: the one TestMain built from this tree), so that one set of
// clients measures two builds alike: contrib/bench/compare.sh gives it
// BASE's.
var benchServer = flag.String("bench.server", "", "meshagent binary whose relay BenchmarkBusServerCPU measures (default: this tree's)")

// The shape of bus/bench_test.go's round trip: ten subscribers, each
// answering every message, four sender connections, 32 round trips in
// flight.
const (
	serverCPUSubscribers = 10
	serverCPUSenders     = 4
	serverCPUInFlight    = 32
	serverCPUWarmup      = 500
)

// BenchmarkBusServerCPU runs b.N bus round trips through a `meshagent
// relay` process (its bus, with its store and its node) and reports the
// CPU that process used per round trip, read from /proc: the server's
// cost alone, which BenchmarkBusCPUPerTrip (bus) measures together with
// its Go clients in one process. Each round trip is a sendMessage to ten
// subscribers, each of which answers processMessage.
//
//	go test ./cmd/meshagent -run '^$' -bench BusServerCPU -benchtime 20000x [-args -bench.server=PATH]
func BenchmarkBusServerCPU(b *testing.B) {
	bin := binary
	if *benchServer != "" {
		bin = *benchServer
	}
	cmd := exec.Command(bin, commandArgs("relay", "bench-relay", "--data", filepath.Join(b.TempDir(), "relay"),
		"--api", "off", "--ws", "127.0.0.1:0", "--log-level", "warn")...)
	cmd.Env = env(b)
	relay := launch(b, "relay", cmd)
	url := "ws://" + relay.started.WS + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dial := func(id string, opts ...rpc.ClientOption) *rpc.Client {
		c, err := rpc.Dial(ctx, url, append(opts, rpc.WithClientID(id))...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = c.Close() })
		return c
	}
	// Ten patterns of the one topic: a newer subscription to the same
	// pattern would shadow the older one.
	patterns := []string{"bench:rt", "bench:*", "bench:r*", "bench:*t", "bench:?t", "bench:r?", "b*:rt", "bench*", "*:rt", "*rt"}
	processed := bus.ProcessResult{Processed: true}
	for i, pattern := range patterns[:serverCPUSubscribers] {
		c := dial("sub-"+strconv.Itoa(i), rpc.WithRequestHandler(func(context.Context, string, json.RawMessage) (any, error) {
			return processed, nil
		}))
		if err := c.Call(ctx, bus.MethodSubscribe, map[string]any{"topic": pattern, "policy": "continueAll"}, nil); err != nil {
			b.Fatal(err)
		}
	}
	senders := make([]*rpc.Client, serverCPUSenders)
	for i := range senders {
		senders[i] = dial("sender-" + strconv.Itoa(i))
	}
	trip := func(i int) error {
		var res bus.SendResult
		err := senders[i%serverCPUSenders].Call(ctx, bus.MethodSendMessage, map[string]any{
			"topic":   "bench:rt",
			"payload": map[string]any{"type": "plaintext_message", "text": "message " + strconv.Itoa(i)},
		}, &res)
		if err == nil && len(res.Acks) != serverCPUSubscribers {
			err = fmt.Errorf("%d acks, want %d: %+v", len(res.Acks), serverCPUSubscribers, res)
		}
		return err
	}
	for i := range serverCPUWarmup {
		if err := trip(i); err != nil {
			b.Fatal(err)
		}
	}
	pid := relay.cmd.Process.Pid
	before := processTicks(b, pid)
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for range serverCPUInFlight {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if err := trip(int(i)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	ticks := processTicks(b, pid) - before
	// Linux reports a process's CPU in clock ticks of 10 ms (USER_HZ is
	// 100 on every architecture Go runs on).
	b.ReportMetric(float64(ticks)*1e4/float64(b.N), "server-cpu-µs/trip")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "trips/s")
}

// processTicks is the CPU time, user and system, that process pid has
// used so far, in clock ticks (/proc/PID/stat's utime and stime).
func processTicks(tb testing.TB, pid int) int64 {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after it, utime and stime being the 14th and 15th of the line.
	_, rest, ok := strings.Cut(string(data), ") ")
	fields := strings.Fields(rest)
	if !ok || len(fields) < 13 {
		tb.Fatalf("/proc/%d/stat: %q", pid, data)
	}
	var total int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			tb.Fatalf("/proc/%d/stat: %q: %v", pid, data, err)
		}
		total += n
	}
	return total
}
