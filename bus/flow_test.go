package bus_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/rpc"
)

// Flow control: deliveries to a subscriber wait for one of its
// Limits.MaxPendingCalls slots, so a burst of sends slows the senders
// down instead of overrunning the subscriber's send queue.

// flowSenders × flowPerSender = 512 messages are in flight at once: each
// sender connection keeps flowLimits' MaxConcurrentCalls requests busy.
const (
	flowSenders   = 64
	flowPerSender = 8
)

// flowLimits are small per-connection limits, so that a burst of 512
// deliveries overruns a subscriber's send queue on any machine unless
// deliveries wait for MaxPendingCalls (the defaults keep the same
// proportions: 64 + 64 below 256).
func flowLimits() rpc.Limits {
	l := rpc.DefaultLimits()
	l.SendQueue = 32
	l.MaxConcurrentCalls = flowPerSender
	l.MaxBatch = flowPerSender
	l.MaxPendingCalls = 16
	return l
}

// flowServer serves a bus with a store and limits l.
func flowServer(t *testing.T, l rpc.Limits) string {
	t.Helper()
	st := openStore(t, filepath.Join(t.TempDir(), "flow.db"))
	// The default DeliveryTimeout (30 s), which covers the wait for a
	// slot: on a loaded 2-core machine with the race detector, 512 round
	// trips can take longer than fastBus's 2 s.
	return rpctest.Start(t, fakemesh.New(), rpctest.WithBus(bus.WithStore(st)), rpctest.WithRPC(rpc.WithLimits(l))).URL
}

// heapPeak samples the heap until stop is called, which returns the peak
// HeapAlloc seen.
func heapPeak() (stop func() uint64) {
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapAlloc > peak.Load() {
			peak.Store(ms.HeapAlloc)
		}
	}
	wg.Go(func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				sample()
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		sample()
		return peak.Load()
	}
}

// flood sends senders × flowPerSender messages to topic at once, from
// senders connections, and returns each result and error.
func flood(t *testing.T, url, topic string, payload map[string]any, flowSenders int) ([]bus.SendResult, []error) {
	t.Helper()
	senders := make([]*peer, flowSenders)
	for i := range senders {
		senders[i] = newPeer(t, url, fmt.Sprintf("sender-%d", i), nil)
	}
	n := flowSenders * flowPerSender
	results, errs := make([]bus.SendResult, n), make([]error, n)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			errs[i] = senders[i%flowSenders].Call(ctx, bus.MethodSendMessage, map[string]any{"topic": topic, "payload": payload}, &results[i])
		})
	}
	wg.Wait()
	return results, errs
}

// A subscriber that reads and answers keeps its connection under 512
// messages in flight to its topic, and every send succeeds, processed.
func TestReadingSubscriberKeptUnderFlood(t *testing.T) {
	url := flowServer(t, flowLimits())
	var got atomic.Int64
	sub := newPeer(t, url, "reader", func(delivery) (any, error) {
		got.Add(1)
		work() // a subscriber doing some work before it answers
		return map[string]any{"processed": true}, nil
	})
	sub.subscribe(t, map[string]any{"topic": "flow:*"})
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	stop := heapPeak()
	start := time.Now()
	results, errs := flood(t, url, "flow:1", map[string]any{"type": "plaintext_message", "text": strings.Repeat("x", 1024)}, flowSenders)
	elapsed := time.Since(start)
	peak := stop()
	bad := 0
	for i := range results {
		if errs[i] != nil || !results[i].Success || len(results[i].Acks) != 1 || !results[i].Acks[0].Processed {
			if bad++; bad <= 5 {
				t.Errorf("send %d: %+v %v", i, results[i], errs[i])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d sends failed (subscriber got %d) in %v", bad, len(results), got.Load(), elapsed)
	}
	select {
	case <-sub.Done():
		t.Fatal("the reading subscriber was disconnected")
	default:
	}
	if err := sub.Call(ctxT(t), rpc.MethodPing, nil, nil); err != nil {
		t.Fatalf("reading subscriber after the flood: %v", err)
	}
	if n := got.Load(); n != int64(len(results)) {
		t.Fatalf("subscriber processed %d of %d", n, len(results))
	}
	t.Logf("%d sends in flight, 1 KiB payloads: all processed in %v; peak heap %.1f MiB (%.1f MiB above the start, clients and server in one process)",
		len(results), elapsed.Round(time.Millisecond), float64(peak)/(1<<20), float64(peak-min(peak, before.HeapAlloc))/(1<<20))
}

// A subscriber that stops reading is disconnected (it misses its pings,
// and its writes stall past WriteTimeout) while a reading one under the
// same flood keeps its connection; the reading one gets every message.
func TestNonReadingSubscriberCutReaderKept(t *testing.T) {
	l := flowLimits()
	// Short enough to keep the test fast, long enough that a client that
	// reads answers in time on a loaded 2-core machine under the race
	// detector (at 2 s, readers and senders missed pings there too).
	l.PingInterval = 5 * time.Second
	l.WriteTimeout = 5 * time.Second
	url := flowServer(t, l)
	var got atomic.Int64
	reader := newPeer(t, url, "reader", func(delivery) (any, error) {
		got.Add(1)
		work() // a subscriber doing some work before it answers
		return map[string]any{"processed": true}, nil
	})
	reader.subscribe(t, map[string]any{"topic": "flow:*", "policy": "continueAll"})
	stalled := dialRaw(t, url)
	writeFrame(t, stalled, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"clientId":"stalled","clientInfo":{"name":"test"}}}`)
	readFrame(t, stalled)
	writeFrame(t, stalled, `{"jsonrpc":"2.0","id":2,"method":"subscribe","params":{"topic":"flow:1","policy":"continueAll"}}`)
	if r := readFrame(t, stalled); !strings.Contains(r, `"success":true`) {
		t.Fatalf("subscribe: %s", r)
	}
	// stalled never reads again.
	// 64 in flight: enough to keep both subscribers' slots busy, light
	// enough that readers answer their pings on a loaded machine.
	results, errs := flood(t, url, "flow:1", map[string]any{"type": "plaintext_message", "text": strings.Repeat("y", 1024)}, 8)
	for i := range results {
		if errs[i] != nil || !results[i].Success {
			t.Fatalf("send %d: %+v %v", i, results[i], errs[i])
		}
		if !hasProcessedAck(results[i], "reader") {
			t.Fatalf("send %d: no processed ack from the reader: %+v", i, results[i])
		}
	}
	select {
	case <-reader.Done():
		t.Fatal("the reading subscriber was disconnected")
	default:
	}
	if n := got.Load(); n != int64(len(results)) {
		t.Fatalf("reader processed %d of %d", n, len(results))
	}
	// The stalled one was cut: reading now finds the connection gone
	// after what was buffered.
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	for {
		if _, _, err := stalled.Read(ctx); err != nil {
			if ctx.Err() != nil {
				t.Fatal("the stalled subscriber is still connected")
			}
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				t.Fatalf("stalled subscriber closed normally: %v", err)
			}
			break
		}
	}
}

func hasProcessedAck(r bus.SendResult, client string) bool {
	for _, a := range r.Acks {
		if a.ClientID == client && a.Processed {
			return true
		}
	}
	return false
}

// work is a subscriber's handling of a message: real CPU work (hashing
// 64 KiB), so deliveries queue up behind it as they would behind an agent.
func work() {
	var buf [64 << 10]byte
	_ = sha256.Sum256(buf[:])
}

// Under a flood to continueAll subscribers, a delivery that finds all of
// its subscriber's request slots taken waits for one (on a goroutine of
// its own) while the others of the fan-out go out at once: every send is
// acked by both, processed.
func TestFanOutWaitsForSlotsUnderFlood(t *testing.T) {
	url := flowServer(t, flowLimits())
	var got atomic.Int64
	for i, pattern := range []string{"fan:*", "fan:?"} {
		p := newPeer(t, url, fmt.Sprintf("sub-%d", i), func(delivery) (any, error) {
			got.Add(1)
			work()
			return map[string]any{"processed": true}, nil
		})
		p.subscribe(t, map[string]any{"topic": pattern, "policy": "continueAll"})
	}
	results, errs := flood(t, url, "fan:1", map[string]any{"type": "plaintext_message", "text": "x"}, flowSenders/4)
	bad := 0
	for i := range results {
		if errs[i] != nil || ackIDs(results[i]) != "sub-1=true sub-0=true" {
			if bad++; bad <= 5 {
				t.Errorf("send %d: %+v %v", i, results[i], errs[i])
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d sends failed", bad, len(results))
	}
	if n := got.Load(); n != 2*int64(len(results)) {
		t.Fatalf("subscribers processed %d of %d deliveries", n, 2*len(results))
	}
}
