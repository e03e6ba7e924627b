//go:build chaos && unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/wait"
)

// relayKillMessages is how many messages flow through the relay's bus
// while it is killed; message i is sent no earlier than i*relayKillPace
// after the start (a late producer catches up), so the run spans about
// sixteen kills.
const (
	relayKillMessages = 2000
	relayKillPace     = 40 * time.Millisecond
	relayKillEvery    = 5 * time.Second
)

// sendRecord is what the producer knows of one message.
type sendRecord struct {
	attempts int  // sendMessage calls made for it
	acked    bool // an ack from the worker: processed, or retrying (in the outbox)
	retrying bool // the ack said retrying
}

// TestChaosRelayKill: a relay process is SIGKILLed every 5 s and restarted
// on the same store and port while a producer sends 2,000 messages through
// its bus to a worker that reconnects each time. The producer sends each
// message until the worker's ack comes back (processed, or retrying: in
// the relay's persisted outbox); the worker asks for one retry of every
// tenth message, so the outbox always holds acknowledged work when the
// relay dies. Every acknowledged message must reach the worker. A
// duplicate is allowed only where at-least-once allows one: the producer
// sent the message more than once (it had no ack), or the relay held it
// for a retry. A message sent once and acknowledged processed must be
// processed once.
func TestChaosRelayKill(t *testing.T) {
	relayKill(t, "relay-kill", "--api", "off")
}

// TestChaosRelayKillWithAPI is TestChaosRelayKill with the relay's
// loopback API on as well. Its second bus on the same store (issue 12
// defect 4) had a retry loop of its own that took retries meant for the
// public bus's worker and dead-lettered them ("client worker is not
// subscribed"); since retries wait for an absent subscriber, none is lost.
func TestChaosRelayKillWithAPI(t *testing.T) {
	relayKill(t, "relay-kill-api", "--api", "127.0.0.1:0")
}

func relayKill(t *testing.T, scenario string, extra ...string) {
	dir := filepath.Join(t.TempDir(), "relay")
	// extra chooses whether a loopback API runs next to the public bus.
	rl := startCommand(t, "relay", "relay-0", append([]string{"--data", dir, "--ws", "127.0.0.1:0"}, extra...)...)
	addr := rl.started.WS
	url := "ws://" + addr + "/"

	var (
		mu        sync.Mutex
		received  = map[string]int{} // text -> deliveries
		processed = map[string]int{} // text -> deliveries answered processed
		askedOnce = map[string]bool{}
		records   = make([]sendRecord, relayKillMessages)
	)
	worker := &busSession{url: url, id: "worker", topics: []string{"jobs:*"}}
	worker.handler = func(_ context.Context, method string, params json.RawMessage) (any, error) {
		var p struct {
			Payload struct {
				Text string `json:"text"`
				N    int    `json:"n"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		received[p.Payload.Text]++
		if p.Payload.N%10 == 0 && !askedOnce[p.Payload.Text] {
			askedOnce[p.Payload.Text] = true
			return map[string]any{"processed": false, "should_retry": true, "retry_seconds": 1, "message": "later"}, nil
		}
		processed[p.Payload.Text]++
		return map[string]any{"processed": true}, nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// The worker reconnects as soon as its connection ends.
	wg.Go(func() {
		for ctx.Err() == nil {
			cl, err := worker.client(ctx)
			if err != nil {
				return
			}
			select {
			case <-cl.Done():
			case <-ctx.Done():
				worker.drop()
				return
			}
		}
	})

	producer := &busSession{url: url, id: "producer"}
	produced := make(chan error, 1)
	go func() {
		defer producer.drop()
		start := time.Now()
		for i := range relayKillMessages {
			if d := time.Until(start.Add(time.Duration(i) * relayKillPace)); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
				}
			}
			text := fmt.Sprintf("m-%d", i)
			for {
				cl, err := producer.client(ctx)
				if err != nil {
					produced <- err
					return
				}
				mu.Lock()
				records[i].attempts++
				mu.Unlock()
				var res bus.SendResult
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				err = cl.Call(cctx, "sendMessage", map[string]any{"topic": fmt.Sprintf("jobs:%d", i),
					"payload": map[string]any{"type": "task_request", "text": text, "n": i}}, &res)
				ccancel()
				if err != nil {
					producer.drop() // the relay died mid-call: send again
					continue
				}
				if ack, ok := workerAck(res); ok {
					mu.Lock()
					records[i].acked, records[i].retrying = true, ack.Retrying
					mu.Unlock()
					break
				}
				// No worker subscribed at that moment (it is reconnecting
				// to a restarted relay): the producer tries again shortly.
				select {
				case <-ctx.Done():
					produced <- ctx.Err()
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
		produced <- nil
	}()

	kills := 0
	killer := time.NewTicker(relayKillEvery)
	defer killer.Stop()
	var perr error
loop:
	for {
		select {
		case perr = <-produced:
			break loop
		case <-killer.C:
			rl.signal(t, syscall.SIGKILL)
			<-rl.exited
			kills++
			rl = startCommand(t, "relay", fmt.Sprintf("relay-%d", kills), append([]string{"--data", dir, "--ws", addr}, extra...)...)
		}
	}
	if perr != nil {
		t.Fatalf("producer: %v", perr)
	}

	// Every acknowledged message reaches the worker (retries included).
	lostOf := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var lost []string
		for i, r := range records {
			if text := fmt.Sprintf("m-%d", i); r.acked && processed[text] == 0 {
				lost = append(lost, text)
			}
		}
		return lost
	}
	if err := wait.Until(60*time.Second, func() error {
		if lost := lostOf(); len(lost) > 0 {
			return fmt.Errorf("%d acknowledged messages not delivered: %v", len(lost), head(lost, 20))
		}
		return nil
	}); err != nil {
		t.Error(err)
	}

	mu.Lock()
	defer mu.Unlock()
	sent, acked, dups, resent := 0, 0, 0, 0
	var wrongDups []string
	for i, r := range records {
		text := fmt.Sprintf("m-%d", i)
		sent++
		if r.acked {
			acked++
		}
		if r.attempts > 1 {
			resent++
		}
		extra := received[text] - 1
		if askedOnce[text] {
			extra-- // the retry the worker asked for
		}
		if extra > 0 {
			dups += extra
			if r.attempts == 1 && r.acked && !r.retrying && !askedOnce[text] {
				wrongDups = append(wrongDups, fmt.Sprintf("%s x%d", text, received[text]))
			}
		}
	}
	lost := acked - countDelivered(records, processed)
	figures(t, scenario, "%d sent, %d acked, %d lost, %d duplicates, %d kills (%d messages resent without an ack, %d worker connections)",
		sent, acked, lost, dups, kills, resent, worker.connections())
	if acked != sent {
		t.Errorf("%d of %d messages acknowledged", acked, sent)
	}
	if kills < 12 {
		t.Errorf("only %d kills during the run", kills)
	}
	if len(wrongDups) > 0 {
		t.Errorf("%d messages sent once and acknowledged processed were delivered again: %v", len(wrongDups), head(wrongDups, 20))
	}
}

// workerAck returns the worker's ack in a sendMessage result, if it
// processed the message or it is in the relay's outbox for a retry.
func workerAck(res bus.SendResult) (bus.Ack, bool) {
	for _, a := range res.Acks {
		if a.ClientID == "worker" && (a.Processed || a.Retrying) {
			return a, true
		}
	}
	return bus.Ack{}, false
}

// countDelivered counts the acknowledged messages the worker processed.
func countDelivered(records []sendRecord, processed map[string]int) int {
	n := 0
	for i, r := range records {
		if r.acked && processed[fmt.Sprintf("m-%d", i)] > 0 {
			n++
		}
	}
	return n
}

// head returns at most n elements of s.
func head[T any](s []T, n int) []T {
	return s[:min(n, len(s))]
}
