package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// TestGoAPI exercises seed 004's client calls: a synchronous request with
// a timeout, an asynchronous one with a callback, and a notification to a
// topic subscriber.
func TestGoAPI(t *testing.T) {
	slow := make(chan struct{})
	defer close(slow)
	provider := meshtest.Node(t, 80, node.WithServices(
		node.Service{Capability: protocol.Capability{Name: "run_tests"}, Handler: node.EchoHandler()},
		node.Service{Capability: protocol.Capability{Name: "slow"}, Handler: node.HandlerFunc(func(ctx context.Context, _ *node.Call) (json.RawMessage, error) {
			select {
			case <-slow:
			case <-ctx.Done():
			}
			return nil, ctx.Err()
		})}))
	engineer := meshtest.Node(t, 81)
	meshtest.Connect(t, engineer, provider)
	ctx := meshtest.Context(t, 20*time.Second)

	res, err := engineer.SendRequest(ctx, provider.PublicKeyBase64(), "run_tests", json.RawMessage(`{"suite":"unit"}`), 5*time.Second)
	if err != nil || string(res) != `{"suite":"unit"}` {
		t.Fatalf("SendRequest: %s %v", res, err)
	}
	_, err = engineer.SendRequest(ctx, provider.AgentID(), "slow", nil, 200*time.Millisecond)
	if protocol.CodeOf(err) != protocol.CodeTimeout {
		t.Fatalf("SendRequest past its timeout: %v, want TIMEOUT", err)
	}

	type outcome struct {
		res json.RawMessage
		err error
	}
	done := make(chan outcome, 1)
	if err := engineer.SendRequestAsync(ctx, provider.AgentID(), "run_tests", json.RawMessage(`{"suite":"e2e"}`), 0, func(r json.RawMessage, err error) {
		done <- outcome{r, err}
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-done:
		if o.err != nil || string(o.res) != `{"suite":"e2e"}` {
			t.Fatalf("async result %s %v", o.res, o.err)
		}
	case <-ctx.Done():
		t.Fatal("the async callback never came")
	}

	got := make(chan protocol.TopicMessage, 1)
	cancel, err := provider.Subscribe("bead.status.*", func(m protocol.TopicMessage) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	if _, err := engineer.SendNotification(ctx, "bead.status.completed", "bead_completed", json.RawMessage(`{"bead_id":"b-1"}`), nil); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		var nt node.Notification
		if err := json.Unmarshal(m.Payload, &nt); err != nil || nt.NotificationType != "bead_completed" || string(nt.Payload) != `{"bead_id":"b-1"}` {
			t.Fatalf("notification %s (%v)", m.Payload, err)
		}
	case <-ctx.Done():
		t.Fatal("the notification never came")
	}
	if _, err := engineer.SendNotification(ctx, "bead.status.x", "", nil, nil); protocol.CodeOf(err) != protocol.CodeInvalidMessage {
		t.Errorf("a notification without a type: %v", err)
	}

	if err := engineer.Close(); err != nil {
		t.Fatal(err)
	}
	if err := engineer.SendRequestAsync(ctx, provider.AgentID(), "run_tests", nil, 0, func(json.RawMessage, error) {}); !errors.Is(err, node.ErrClosed) {
		t.Errorf("SendRequestAsync after Close: %v, want ErrClosed", err)
	}
}
