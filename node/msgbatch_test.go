package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// TestMessageBatches: messages to one agent sent while others are in
// flight go out in agent.messages batches, and each sender still gets its
// own message's answer or error, every message processed once.
func TestMessageBatches(t *testing.T) {
	sender := meshtest.Node(t, 120)
	receiver := meshtest.Node(t, 121)
	meshtest.Connect(t, sender, receiver)

	const total = 200
	var (
		mu      sync.Mutex
		seen    = map[string]int{}
		entered atomic.Int64
	)
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // a failed test does not leave handlers blocked
	receiver.OnMessage(func(_ context.Context, from peer.ID, m protocol.AgentMessage) (json.RawMessage, error) {
		mu.Lock()
		seen[m.MessageID]++
		mu.Unlock()
		if m.Subject == "hold" {
			entered.Add(1)
			<-release
		}
		if m.Body == "refuse" {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "refused %s", m.MessageID)
		}
		return json.Marshal(map[string]string{"ack": m.MessageID})
	})
	ctx := meshtest.Context(t, 60*time.Second)

	// Four messages take the four requests in flight and hold them.
	var wg sync.WaitGroup
	errs := make(chan error, total+4)
	send := func(m protocol.AgentMessage, want string) {
		defer wg.Done()
		res, err := sender.SendMessage(ctx, receiver.AgentID(), m, 30*time.Second)
		if want == "refuse" {
			if protocol.CodeOf(err) != protocol.CodeInvalidMessage {
				errs <- fmt.Errorf("%s: got %s %v, want INVALID_MESSAGE", m.MessageID, res, err)
			}
			return
		}
		var got struct{ Ack string }
		if err != nil || json.Unmarshal(res, &got) != nil || got.Ack != m.MessageID {
			errs <- fmt.Errorf("%s: got %s %v", m.MessageID, res, err)
		}
	}
	for i := range 4 {
		wg.Add(1)
		go send(protocol.AgentMessage{MessageID: fmt.Sprintf("hold-%d", i), Subject: "hold", RequiresResponse: true}, "")
	}
	wait.ForTrue(t, 20*time.Second, "four messages held by the handler", func() bool { return entered.Load() == 4 })
	// Every request in flight is held: a message sent now goes in a
	// request of its own once it has waited a while, not after them.
	// (Within 10 s: behind the held requests it would wait for their
	// 30 s timeout.)
	pastCtx, cancelPast := context.WithTimeout(ctx, 10*time.Second)
	defer cancelPast()
	res, err := sender.SendMessage(pastCtx, receiver.AgentID(), protocol.AgentMessage{MessageID: "past-the-held", Subject: "s", RequiresResponse: true}, 10*time.Second)
	if err != nil || string(res) != `{"ack":"past-the-held"}` {
		t.Fatalf("a message behind held ones: %s %v", res, err)
	}
	// These wait for a request to finish, then go together.
	for i := range total {
		body, want := "hello", ""
		if i%10 == 0 {
			body, want = "refuse", "refuse"
		}
		wg.Add(1)
		go send(protocol.AgentMessage{MessageID: fmt.Sprintf("m-%d", i), Subject: "s", Body: body, RequiresResponse: true}, want)
	}
	unblock()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != total+5 {
		t.Errorf("%d distinct messages processed, want %d", len(seen), total+5)
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("message %s processed %d times", id, n)
		}
	}
	batches := 0
	for _, c := range receiver.RecentCalls() {
		if c.Capability == protocol.MessageBatchCapability {
			batches++
			if c.Outcome != "success" {
				t.Errorf("batch answered %s", c.Outcome)
			}
		}
	}
	if batches == 0 {
		t.Errorf("no agent.messages batch served; recent calls %+v", receiver.RecentCalls())
	}
}

// TestMessageBatchLimits: a batch is refused whole when it is empty or too
// large, and a message of it that does not decode is refused alone.
func TestMessageBatchLimits(t *testing.T) {
	sender := meshtest.Node(t, 122)
	receiver := meshtest.Node(t, 123)
	meshtest.Connect(t, sender, receiver)
	receiver.OnMessage(func(context.Context, peer.ID, protocol.AgentMessage) (json.RawMessage, error) {
		return json.RawMessage(`"ok"`), nil
	})
	ctx := meshtest.Context(t, 30*time.Second)
	call := func(params string) (*protocol.Response, error) {
		return sender.Call(ctx, protocol.CallRequest{To: receiver.AgentID(), Action: protocol.MessageBatchCapability, Params: json.RawMessage(params)})
	}
	big := `{"messages":[`
	for i := range protocol.MaxMessageBatch + 1 {
		if i > 0 {
			big += ","
		}
		big += fmt.Sprintf(`{"message_id":"b%d","subject":"s"}`, i)
	}
	big += `]}`
	for _, tc := range []struct{ name, params string }{
		{"empty", `{"messages":[]}`},
		{"too many", big},
		{"not an array", `{"messages":{"message_id":"x"}}`},
		{"missing", `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := call(tc.params)
			if protocol.CodeOf(err) != protocol.CodeInvalidMessage {
				t.Fatalf("got %v, want INVALID_MESSAGE", err)
			}
		})
	}
	t.Run("one bad message", func(t *testing.T) {
		resp, err := call(`{"messages":[{"message_id":"ok-1","subject":"s","requires_response":true},{"message_id":7},{"message_id":"ok-2","subject":"s","priority":"whenever"}]}`)
		if err != nil {
			t.Fatal(err)
		}
		var out protocol.MessageBatchResult
		if err := json.Unmarshal(resp.Result, &out); err != nil || len(out.Results) != 3 {
			t.Fatalf("result %s: %v", resp.Result, err)
		}
		if string(out.Results[0].Result) != `"ok"` || out.Results[0].Error != nil {
			t.Errorf("first: %s %v", out.Results[0].Result, out.Results[0].Error)
		}
		for i := 1; i < 3; i++ {
			if e := out.Results[i].Error; e == nil || e.Code != protocol.CodeInvalidMessage {
				t.Errorf("message %d: %+v, want INVALID_MESSAGE", i, out.Results[i])
			}
		}
	})
	t.Run("rate limit per message", func(t *testing.T) {
		lim := node.DefaultLimits()
		lim.RequestsPerSecond, lim.Burst = 0.001, 3
		limited := meshtest.Node(t, 124, node.WithLimits(lim))
		meshtest.Connect(t, sender, limited)
		resp, err := sender.Call(ctx, protocol.CallRequest{To: limited.AgentID(), Action: protocol.MessageBatchCapability,
			Params: json.RawMessage(`{"messages":[{"message_id":"r1","subject":"s"},{"message_id":"r2","subject":"s"},{"message_id":"r3","subject":"s"},{"message_id":"r4","subject":"s"}]}`)})
		if err != nil {
			t.Fatal(err)
		}
		var out protocol.MessageBatchResult
		if err := json.Unmarshal(resp.Result, &out); err != nil || len(out.Results) != 4 {
			t.Fatalf("result %s: %v", resp.Result, err)
		}
		// The request took one token, two messages more the other two.
		for i, want := range []protocol.Code{"", "", "", protocol.CodeRateLimited} {
			var got protocol.Code
			if out.Results[i].Error != nil {
				got = out.Results[i].Error.Code
			}
			if got != want {
				t.Errorf("message %d: %q, want %q", i, got, want)
			}
		}
	})
}
