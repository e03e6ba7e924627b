package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// retryingSubscriber is a bus client that answers its first delivery
// should_retry and the next ones processed.
type retryingSubscriber struct {
	*rpc.Client
	mu         sync.Mutex
	deliveries int
}

func dialRetryingSubscriber(t *testing.T, ctx context.Context, url, id, pattern string) *retryingSubscriber {
	t.Helper()
	s := &retryingSubscriber{}
	cl, err := rpc.Dial(ctx, url, rpc.WithClientID(id), rpc.WithRequestHandler(func(context.Context, string, json.RawMessage) (any, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.deliveries++
		if s.deliveries == 1 {
			return bus.ProcessResult{ShouldRetry: true, RetrySeconds: 1, Message: "busy"}, nil
		}
		return bus.ProcessResult{Processed: true}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	s.Client = cl
	if err := cl.Call(ctx, bus.MethodSubscribe, map[string]string{"topic": pattern}, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *retryingSubscriber) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deliveries
}

// TestRelayOneBus starts a relay's public listener and a local API: they
// serve one bus, so a message sent on one listener
// reaches a subscriber on the other, and its retry goes to that
// subscriber instead of being dead-lettered while it is connected.
func TestRelayOneBus(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), StoreFileName), store.WithPruneInterval(0), store.WithLogger(testlog.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	n := meshtest.Node(t, 305, node.WithStore(st))
	d := startTest(t, WithNode(n), WithStore(st), WithPublic(Public{Addr: "127.0.0.1:0"}))
	public, local := "ws://"+d.PublicAddr()+"/", "ws://"+d.APIAddr()+"/"
	for _, tc := range []struct{ name, subURL, sendURL string }{
		{"subscriber public, sender local", public, local},
		{"subscriber local, sender public", local, public},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			topic := fmt.Sprintf("inbound:%d", time.Now().UnixNano())
			sub := dialRetryingSubscriber(t, ctx, tc.subURL, "worker-"+topic, topic)
			sender, err := rpc.Dial(ctx, tc.sendURL, rpc.WithClientID("sender-"+topic))
			if err != nil {
				t.Fatal(err)
			}
			defer sender.Close()
			var res bus.SendResult
			if err := sender.Call(ctx, bus.MethodSendMessage, map[string]any{"topic": topic, "payload": map[string]string{"type": "plaintext_message", "text": "hi"}}, &res); err != nil {
				t.Fatal(err)
			}
			if len(res.Acks) != 1 || res.Acks[0].ClientID != "worker-"+topic || !res.Acks[0].Retrying {
				t.Fatalf("sendMessage result %+v, want one ack from the subscriber, retrying", res)
			}
			wait.For(t, 15*time.Second, func() error {
				if n := sub.count(); n < 2 {
					return fmt.Errorf("%d deliveries, want the retry as well", n)
				}
				return nil
			})
			admin, err := rpc.Dial(ctx, local)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			var dead []bus.StoredMessage
			if err := admin.Call(ctx, bus.MethodBusDeadLetters, map[string]string{"topic": topic}, &dead); err != nil {
				t.Fatal(err)
			}
			if len(dead) != 0 {
				t.Errorf("dead letters %+v while the subscriber is connected", dead)
			}
			if n := sub.count(); n != 2 {
				t.Errorf("%d deliveries, want 2 (one should_retry, one processed)", n)
			}
		})
	}
}
