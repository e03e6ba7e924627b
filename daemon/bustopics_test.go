package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// TestBusTopicsCrossTheMesh: the bus of a node's local API, and the bus of
// a relay's public listener on its own, is given the node's topics: a
// message a bus client sends reaches a subscription of the node's (and its
// ack says so), and a message the node publishes reaches a bus subscriber.
// Without the wiring (bus.WithTopics) both stay on their side.
func TestBusTopicsCrossTheMesh(t *testing.T) {
	for i, tc := range []struct {
		name string
		url  func(*Daemon) string
		opts []Option
	}{
		{"local API", func(d *Daemon) string { return "ws://" + d.APIAddr() + "/" }, []Option{WithAPI("127.0.0.1:0")}},
		{"relay's own server", func(d *Daemon) string { return "ws://" + d.PublicAddr() + "/" }, []Option{WithPublic(Public{Addr: "127.0.0.1:0"})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := store.Open(filepath.Join(t.TempDir(), StoreFileName), store.WithLogger(testlog.New(t)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			n := meshtest.Node(t, 331+i)
			d, err := Start(t.Context(), append([]Option{WithLogger(testlog.New(t)), WithNode(n), WithStore(st)}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close(context.Background()) })
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()

			// The node's own subscription, not the bus's: a mesh receiver.
			fromBus := make(chan protocol.TopicMessage, 4)
			stop, err := n.Subscribe("news:*", func(m protocol.TopicMessage) {
				select {
				case fromBus <- m:
				default:
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			defer stop()
			sender, err := rpc.Dial(ctx, tc.url(d), rpc.WithClientID("sender"))
			if err != nil {
				t.Fatal(err)
			}
			defer sender.Close()
			var res bus.SendResult
			if err := sender.Call(ctx, bus.MethodSendMessage, map[string]any{"topic": "news:1", "payload": map[string]string{"type": "plaintext_message", "text": "to the mesh"}}, &res); err != nil {
				t.Fatal(err)
			}
			if !res.Success || len(res.Acks) != 1 || res.Acks[0].ClientID != "mesh" {
				t.Errorf("news:1 with a mesh subscriber only: %+v, want one ack from the mesh", res)
			}
			select {
			case m := <-fromBus:
				if m.Topic != "news:1" {
					t.Errorf("the node's subscription got %q, want news:1", m.Topic)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("a message a bus client sent never reached the node's subscription")
			}

			var mu sync.Mutex
			var got []string
			sub, err := rpc.Dial(ctx, tc.url(d), rpc.WithClientID("sub"), rpc.WithRequestHandler(func(_ context.Context, _ string, params json.RawMessage) (any, error) {
				var p bus.ProcessParams
				if err := json.Unmarshal(params, &p); err != nil {
					return nil, err
				}
				mu.Lock()
				got = append(got, p.Topic)
				mu.Unlock()
				return bus.ProcessResult{Processed: true}, nil
			}))
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Close()
			if err := sub.Call(ctx, bus.MethodSubscribe, map[string]string{"topic": "news:*"}, nil); err != nil {
				t.Fatal(err)
			}
			// Published again until it arrives: the bus's mesh
			// subscription may follow its answer.
			wait.For(t, 15*time.Second, func() error {
				mu.Lock()
				seen := append([]string(nil), got...)
				mu.Unlock()
				for _, topic := range seen {
					if topic == "news:2" {
						return nil
					}
				}
				if _, err := n.Publish(ctx, "news:2", json.RawMessage(`{"type":"plaintext_message","text":"from the node"}`), nil); err != nil && !errors.Is(err, protocol.ErrNoPeers) {
					return err
				}
				return fmt.Errorf("the bus subscriber got %v, not news:2 the node published", seen)
			})
		})
	}
}
