package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// tally counts the messages one subscriber received, by their "n".
type tally struct {
	mu  sync.Mutex
	got map[string]int
}

func (c *tally) add(payload json.RawMessage) {
	var p struct{ N string }
	_ = json.Unmarshal(payload, &p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.got == nil {
		c.got = map[string]int{}
	}
	c.got[p.N]++
}

func (c *tally) count(n string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got[n]
}

func (c *tally) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(c.got)
}

// busSubscriber is a seed 001 client of a local API subscribed to pattern
// under continueAll, counting its processMessage deliveries.
func busSubscriber(t *testing.T, api, id string, patterns ...string) (*rpc.Client, *tally) {
	t.Helper()
	tl := &tally{}
	ctx := meshtest.Context(t, 10*time.Second)
	c, err := rpc.Dial(ctx, api, rpc.WithClientID(id), rpc.WithRequestHandler(func(_ context.Context, method string, params json.RawMessage) (any, error) {
		var p bus.ProcessParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, err
		}
		tl.add(p.Payload)
		return map[string]any{"processed": true}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	for _, p := range patterns {
		if err := c.Call(ctx, bus.MethodSubscribe, map[string]any{"topic": p, "policy": "continueAll"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return c, tl
}

// TestOwnPublishReachesOwnSubscribers (issue 12, defect 5): on node X,
// bus subscribers and mesh.subscribe subscribers form one subscription
// world with the node's own subscriptions. A message published on X, by
// the CLI's publish, Node.Publish or a bus client's sendMessage, reaches
// each of them exactly once, as one published on another node Y does; and
// the publish counts them instead of failing with "no agent subscribes".
func TestOwnPublishReachesOwnSubscribers(t *testing.T) {
	x := meshtest.Node(t, 60)
	y := meshtest.Node(t, 61)
	meshtest.Connect(t, x, y)
	api := serveAPI(t, x)

	// Two bus clients whose patterns both match: X's bus holds a mesh
	// subscription per pattern, and must still deliver each message once.
	_, watcher := busSubscriber(t, api, "watcher", "outbound:*")
	_, auditor := busSubscriber(t, api, "auditor", "outbound:")
	meshSub := &tally{}
	ctx := meshtest.Context(t, 60*time.Second)
	mc, err := rpc.Dial(ctx, api)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mc.Close() })
	if _, err := mc.Subscribe(ctx, "outbound:*", func(m protocol.TopicMessage) { meshSub.add(m.Payload) }); err != nil {
		t.Fatal(err)
	}
	nodeSub := &tally{}
	cancel, err := x.Subscribe("outbound:*", func(m protocol.TopicMessage) { nodeSub.add(m.Payload) })
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	subscribers := map[string]*tally{"bus watcher": watcher, "bus auditor": auditor, "mesh.subscribe": meshSub, "Node.Subscribe": nodeSub}

	// The CLI's publish on X: nobody on Y subscribes, X's own subscribers do.
	res := runCLI(t, "", "publish", "outbound:2", "--payload", `{"n":"cli"}`, "--timeout", "2s", "--api", api, "--json")
	res.wantCode(t, ExitOK)
	var pr rpc.PublishResult
	if err := json.Unmarshal([]byte(res.stdout), &pr); err != nil || pr.Peers < 3 {
		t.Errorf("publish printed %q: want the local subscriptions counted (%v)", res.stdout, err)
	}
	// Node.Publish on X.
	if n, err := x.Publish(ctx, "outbound:3", json.RawMessage(`{"n":"node"}`), nil); err != nil || n < 3 {
		t.Errorf("Node.Publish = %d, %v", n, err)
	}
	// A bus client's sendMessage on X: delivered by the bus itself, and
	// its mesh copy reaches the other local subscribers, not the bus's
	// subscribers a second time.
	sender, _ := busSubscriber(t, api, "sender")
	var sr bus.SendResult
	if err := sender.Call(ctx, bus.MethodSendMessage, map[string]any{"topic": "outbound:4", "payload": map[string]string{"type": "event", "n": "bus"}}, &sr); err != nil || !sr.Success {
		t.Errorf("sendMessage: %+v %v", sr, err)
	}
	// Y publishes: X subscribes to the family, so Y finds it.
	if _, err := y.Publish(ctx, "outbound:5", json.RawMessage(`{"n":"remote"}`), nil); err != nil {
		t.Errorf("Y's publish: %v", err)
	}
	// A last message from X; once everyone has it, the earlier ones (and
	// any duplicate of them) had their chance.
	if _, err := x.Publish(ctx, "outbound:6", json.RawMessage(`{"n":"end"}`), nil); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, func() error {
		for name, tl := range subscribers {
			if tl.count("end") == 0 {
				return fmt.Errorf("%s has not received the last message: %v", name, tl)
			}
		}
		return nil
	})
	wait.For(t, 20*time.Second, func() error {
		for name, tl := range subscribers {
			for _, n := range []string{"cli", "node", "bus", "remote"} {
				if tl.count(n) != 1 {
					return fmt.Errorf("%s got the %s message %d times, want once: %v", name, n, tl.count(n), tl)
				}
			}
		}
		return nil
	})
	for name, tl := range subscribers {
		if s := tl.String(); strings.Count(s, ":1") != 5 {
			t.Errorf("%s received %s, want each of the 5 messages once", name, s)
		}
	}
}
