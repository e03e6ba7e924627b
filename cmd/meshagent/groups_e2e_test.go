//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/rpc"
)

// TestBusQueueGroup: three bus clients of a node process's local API
// subscribe to job:* in the queue group "workers"; `meshagent
// send-message` sends 12 messages, each processed by exactly one member,
// every member taking some. One member disconnects while it holds a
// message: the node retries it at another member, and nothing is lost.
func TestBusQueueGroup(t *testing.T) {
	n := startNode(t, "groups", "--data", t.TempDir())
	api := "ws://" + n.started.API + "/"
	var (
		mu  sync.Mutex
		by  = map[string][]string{} // message -> members that processed it
		per = map[string]int{}
	)
	members := map[string]*rpc.Client{}
	var leaving sync.Once
	for _, id := range []string{"w1", "w2", "w3"} {
		got := 0
		handler := func(_ context.Context, method string, params json.RawMessage) (any, error) {
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
			got++
			if id == "w2" && got >= 3 {
				// w2 leaves while it holds this message (Close waits for
				// this handler: it closes in the background).
				leaving.Do(func() { go func() { _ = members["w2"].Close() }() })
				return nil, errors.New("going away")
			}
			msg := fmt.Sprint(p.Payload.N)
			by[msg] = append(by[msg], id)
			per[id]++
			return map[string]any{"processed": true}, nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		c, err := rpc.Dial(ctx, api, rpc.WithClientID(id), rpc.WithRequestHandler(handler))
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		if err := c.Call(ctx, "subscribe", map[string]any{"topic": "job:*", "group": "workers"}, nil); err != nil {
			cancel()
			t.Fatalf("%s subscribe: %v", id, err)
		}
		cancel()
		mu.Lock()
		members[id] = c
		mu.Unlock()
	}
	const total = 12
	for i := range total {
		res := meshagent(t, "send-message", "--bus", api, "--topic", fmt.Sprintf("job:%d", i), "--payload", fmt.Sprintf(`{"type":"job","n":%d}`, i)).must(t, 0)
		var sr struct {
			Acks []struct {
				ClientID string `json:"client_id"`
			} `json:"acks"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &sr); err != nil || len(sr.Acks) != 1 {
			t.Fatalf("message %d: %s (%v), want one ack: one member", i, res.stdout, err)
		}
	}
	wait.For(t, 30*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(by) != total {
			return fmt.Errorf("%d of %d messages processed", len(by), total)
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	for msg, who := range by {
		if len(who) != 1 {
			t.Errorf("message %s processed by %q, want one member", msg, who)
		}
	}
	for _, id := range []string{"w1", "w2", "w3"} {
		if per[id] == 0 {
			t.Errorf("%s processed nothing: %v", id, per)
		}
	}
	if per["w2"] != 2 {
		t.Errorf("w2 processed %d before it left, want 2: %v", per["w2"], per)
	}
}
