//go:build chaos && unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/wait"
)

// Bounds of TestChaosRelayRestartReconnect: message i is sent no earlier
// than i*durPace after the start, the relay is SIGKILLed every durKillEvery,
// and each subscriber drops its own connection every 50–400 ms as well.
const (
	durMessages  = 1000
	durPace      = 40 * time.Millisecond
	durKillEvery = 4 * time.Second
	durSubs      = 3
)

// TestChaosRelayRestartReconnect (issue 23 defect 1): a relay is SIGKILLed
// and restarted while three subscribers to dur:* keep reconnecting (each
// also drops its connection every few hundred milliseconds, so
// subscriptions come and go all the time) and a producer sends 1,000
// messages to dur:<n>. The producer counts a message acknowledged when
// sendMessage answers success:true, whatever the acks are, and sends it
// again otherwise. Every acknowledged message must reach a subscriber: a
// message that reached nobody (the relay's own mesh subscription is no
// receiver) is answered success:false, never "published to 1 mesh peers"
// and dropped.
func TestChaosRelayRestartReconnect(t *testing.T) {
	const scenario = "relay-restart-reconnect"
	dir := filepath.Join(t.TempDir(), "relay")
	rl := startCommand(t, "relay", "relay-0", "--data", dir, "--ws", "127.0.0.1:0", "--api", "off")
	addr := rl.started.WS
	url := "ws://" + addr + "/"

	var (
		mu       sync.Mutex
		received = map[int]int{} // n -> deliveries to any subscriber
		acked    = make([]bool, durMessages)
		attempts = make([]int, durMessages)
		meshOnly int // acks whose only ack came from the mesh
	)
	handler := func(_ context.Context, _ string, params json.RawMessage) (any, error) {
		var p struct {
			Payload struct {
				N int `json:"n"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, err
		}
		mu.Lock()
		received[p.Payload.N]++
		mu.Unlock()
		return map[string]any{"processed": true}, nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	subs := make([]*busSession, durSubs)
	for i := range subs {
		s := &busSession{url: url, id: fmt.Sprintf("sub-%d", i), topics: []string{"dur:*"}, handler: handler}
		subs[i] = s
		wg.Go(func() {
			for ctx.Err() == nil {
				cl, err := s.client(ctx)
				if err != nil {
					return
				}
				select {
				case <-cl.Done():
				case <-time.After(time.Duration(50+rand.IntN(350)) * time.Millisecond):
					s.drop() // a subscriber that reconnects on its own too
				case <-ctx.Done():
					s.drop()
					return
				}
			}
		})
	}

	producer := &busSession{url: url, id: "producer"}
	produced := make(chan error, 1)
	go func() {
		defer producer.drop()
		start := time.Now()
		for i := range durMessages {
			if d := time.Until(start.Add(time.Duration(i) * durPace)); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
				}
			}
			for {
				cl, err := producer.client(ctx)
				if err != nil {
					produced <- err
					return
				}
				mu.Lock()
				attempts[i]++
				mu.Unlock()
				var res bus.SendResult
				cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
				err = cl.Call(cctx, "sendMessage", map[string]any{"topic": fmt.Sprintf("dur:%d", i),
					"payload": map[string]any{"type": "event", "n": i}}, &res)
				ccancel()
				if err != nil {
					producer.drop()
					continue
				}
				if res.Success {
					mu.Lock()
					acked[i] = true
					if len(res.Acks) == 1 && res.Acks[0].ClientID == "mesh" {
						meshOnly++
					}
					mu.Unlock()
					break
				}
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
	killer := time.NewTicker(durKillEvery)
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
			rl = startCommand(t, "relay", fmt.Sprintf("relay-%d", kills), "--data", dir, "--ws", addr, "--api", "off")
		}
	}
	if perr != nil {
		t.Fatalf("producer: %v", perr)
	}
	lostOf := func() []int {
		mu.Lock()
		defer mu.Unlock()
		var lost []int
		for i, a := range acked {
			if a && received[i] == 0 {
				lost = append(lost, i)
			}
		}
		return lost
	}
	// Retries held in the relay's outbox go out as their subscribers come
	// back: give them time.
	if err := wait.Until(45*time.Second, func() error {
		if lost := lostOf(); len(lost) > 0 {
			return fmt.Errorf("%d acknowledged messages not delivered: %v", len(lost), head(lost, 20))
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	lost := len(lostOf())
	mu.Lock()
	defer mu.Unlock()
	nacked, resent, conns := 0, 0, 0
	for i := range acked {
		if acked[i] {
			nacked++
		}
		if attempts[i] > 1 {
			resent++
		}
	}
	for _, s := range subs {
		conns += s.connections()
	}
	figures(t, scenario, "%d sent, %d acknowledged, %d acknowledged messages lost, %d kills, %d subscriber connections, %d messages sent again after success:false or an error, %d acknowledged by the mesh alone",
		durMessages, nacked, lost, kills, conns, resent, meshOnly)
	if meshOnly > 0 {
		t.Errorf("%d messages acknowledged by the mesh alone on a relay without mesh peers", meshOnly)
	}
	if kills < 8 {
		t.Errorf("only %d kills during the run", kills)
	}
}
