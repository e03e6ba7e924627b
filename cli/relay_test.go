package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/relay"
)

// retryingSubscriber is a bus client that answers its first delivery
// should_retry and the next ones processed.
type retryingSubscriber struct {
	*relay.Client
	mu         sync.Mutex
	deliveries int
}

func dialRetryingSubscriber(t *testing.T, ctx context.Context, url, id, pattern string) *retryingSubscriber {
	t.Helper()
	s := &retryingSubscriber{}
	cl, err := relay.Dial(ctx, url, relay.WithClientID(id), relay.WithRequestHandler(func(context.Context, string, json.RawMessage) (any, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.deliveries++
		if s.deliveries == 1 {
			return relay.ProcessResult{ShouldRetry: true, RetrySeconds: 1, Message: "busy"}, nil
		}
		return relay.ProcessResult{Processed: true}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	s.Client = cl
	if err := cl.Call(ctx, relay.MethodSubscribe, map[string]string{"topic": pattern}, nil); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *retryingSubscriber) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deliveries
}

// TestRelayOneBus runs `meshagent relay` with both its public --ws and a
// loopback --api: they serve one bus, so a message sent on one listener
// reaches a subscriber on the other, and its retry goes to that
// subscriber instead of being dead-lettered while it is connected.
func TestRelayOneBus(t *testing.T) {
	rn := startCommand(t, "relay", "--ws", "127.0.0.1:0")
	public, local := "ws://"+rn.started.WS+"/", "ws://"+rn.started.API+"/"
	for _, tc := range []struct{ name, subURL, sendURL string }{
		{"subscriber public, sender local", public, local},
		{"subscriber local, sender public", local, public},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			topic := fmt.Sprintf("inbound:%d", time.Now().UnixNano())
			sub := dialRetryingSubscriber(t, ctx, tc.subURL, "worker-"+topic, topic)
			sender, err := relay.Dial(ctx, tc.sendURL, relay.WithClientID("sender-"+topic))
			if err != nil {
				t.Fatal(err)
			}
			defer sender.Close()
			var res relay.SendResult
			if err := sender.Call(ctx, relay.MethodSendMessage, map[string]any{"topic": topic, "payload": map[string]string{"text": "hi"}}, &res); err != nil {
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
			admin, err := relay.Dial(ctx, local)
			if err != nil {
				t.Fatal(err)
			}
			defer admin.Close()
			var dead []relay.StoredMessage
			if err := admin.Call(ctx, relay.MethodBusDeadLetters, map[string]string{"topic": topic}, &dead); err != nil {
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
