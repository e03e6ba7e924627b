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

// powerLossKills is how many times TestChaosPowerLoss SIGKILLs the relay,
// each 100–800 ms after it started, while it writes.
const powerLossKills = 40

// TestChaosPowerLoss (issue 23, power loss): a relay is SIGKILLed 40 times
// at random points while its bus writes its store without pause: every
// message's first delivery is answered should_retry, so each ack is an
// outbox write (fsync'd before the ack), and each retry, delivery and
// history batch another write. After every kill the relay must start on
// the same store (startCommand fails the test otherwise), and at the end
// every acknowledged message must have been processed by the worker.
func TestChaosPowerLoss(t *testing.T) {
	const scenario = "power-loss"
	dir := filepath.Join(t.TempDir(), "relay")
	rl := startCommand(t, "relay", "relay-0", "--data", dir, "--ws", "127.0.0.1:0", "--api", "off")
	addr := rl.started.WS
	url := "ws://" + addr + "/"

	var (
		mu        sync.Mutex
		asked     = map[int]bool{}
		processed = map[int]int{}
		acked     = map[int]bool{}
		retrying  = 0
		sent      = 0
	)
	worker := &busSession{url: url, id: "worker", topics: []string{"pl:*"}}
	worker.handler = func(_ context.Context, _ string, params json.RawMessage) (any, error) {
		var p struct {
			Payload struct {
				N int `json:"n"`
			} `json:"payload"`
		}
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		if !asked[p.Payload.N] {
			asked[p.Payload.N] = true
			return map[string]any{"processed": false, "should_retry": true, "retry_seconds": 1, "message": "later"}, nil
		}
		processed[p.Payload.N]++
		return map[string]any{"processed": true}, nil
	}

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
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
	stop := make(chan struct{})
	producer := &busSession{url: url, id: "producer"}
	wg.Go(func() {
		defer producer.drop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(15 * time.Millisecond):
			}
			cl, err := producer.client(ctx)
			if err != nil {
				return
			}
			var res bus.SendResult
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			err = cl.Call(cctx, "sendMessage", map[string]any{"topic": fmt.Sprintf("pl:%d", i),
				"payload": map[string]any{"type": "task_request", "n": i}}, &res)
			ccancel()
			mu.Lock()
			sent++
			if ack, ok := workerAck(res); err == nil && ok {
				acked[i] = true
				if ack.Retrying {
					retrying++
				}
			}
			mu.Unlock()
			if err != nil {
				producer.drop() // not acknowledged: this scenario does not send it again
			}
		}
	})

	start := time.Now()
	for k := 1; k <= powerLossKills; k++ {
		select {
		case <-time.After(time.Duration(100+rand.IntN(700)) * time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("out of time after %d kills", k-1)
		}
		rl.signal(t, syscall.SIGKILL)
		<-rl.exited
		rl = startCommand(t, "relay", fmt.Sprintf("relay-%d", k), "--data", dir, "--ws", addr, "--api", "off")
	}
	close(stop)
	killing := time.Since(start)

	lostOf := func() []int {
		mu.Lock()
		defer mu.Unlock()
		var lost []int
		for n := range acked {
			if processed[n] == 0 {
				lost = append(lost, n)
			}
		}
		return lost
	}
	if err := wait.Until(60*time.Second, func() error {
		if lost := lostOf(); len(lost) > 0 {
			return fmt.Errorf("%d acknowledged messages not processed: %v", len(lost), head(lost, 20))
		}
		return nil
	}); err != nil {
		t.Error(err)
	}
	lost := len(lostOf())
	mu.Lock()
	defer mu.Unlock()
	figures(t, scenario, "%d SIGKILLs in %s, the store opened %d of %d times, %d sent, %d acknowledged (%d as retrying, in the outbox), %d acknowledged messages lost",
		powerLossKills, killing.Round(time.Second), powerLossKills, powerLossKills, sent, len(acked), retrying, lost)
	if len(acked) < 100 {
		t.Errorf("only %d messages acknowledged: the scenario wrote too little", len(acked))
	}
}
