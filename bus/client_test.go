package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/rpc"
)

// TestProcessHandler: processMessage reaches the handler with its params
// decoded strictly; anything else is refused with the right code.
func TestProcessHandler(t *testing.T) {
	h := bus.ProcessHandler(func(_ context.Context, p bus.ProcessParams) (bus.ProcessResult, error) {
		return bus.ProcessResult{Processed: true, Message: p.Topic + " " + string(p.Payload)}, nil
	})
	for _, tc := range []struct {
		name, method, params string
		wantCode             int    // 0: answered
		want                 string // the answer's message
	}{
		{"delivery", bus.MethodProcessMessage, `{"topic":"tg:1","payload":{"text":"hi"}}`, 0, `tg:1 {"text":"hi"}`},
		{"other method", bus.MethodSendMessage, `{"topic":"tg:1","payload":{}}`, rpc.CodeMethodNotFound, ""},
		{"topic not a string", bus.MethodProcessMessage, `{"topic":1,"payload":{}}`, rpc.CodeInvalidParams, ""},
		{"unknown member", bus.MethodProcessMessage, `{"topic":"tg:1","payload":{},"extra":1}`, rpc.CodeInvalidParams, ""},
		{"not an object", bus.MethodProcessMessage, `[]`, rpc.CodeInvalidParams, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := h(context.Background(), tc.method, json.RawMessage(tc.params))
			if got := rpcCode(err); got != tc.wantCode {
				t.Fatalf("code %d (%v), want %d", got, err, tc.wantCode)
			}
			if tc.wantCode == 0 {
				if pr, ok := res.(bus.ProcessResult); !ok || !pr.Processed || pr.Message != tc.want {
					t.Errorf("answer %+v, want processed %q", res, tc.want)
				}
			}
		})
	}
}

// TestClient: an agent answers each delivery by sending on another topic
// through the Client its handler is given, which a listener receives; the
// sender reads the acks.
func TestClient(t *testing.T) {
	_, url := busServer(t, fakemesh.New(), nil)
	ctx := ctxT(t)
	dial := func(id string, h bus.ProcessFunc) *bus.Client {
		c, err := bus.Dial(ctx, url, h, rpc.WithClientID(id))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	replies := make(chan string, 1)
	listener := dial("listener", func(_ context.Context, _ *bus.Client, p bus.ProcessParams) (bus.ProcessResult, error) {
		replies <- p.Topic + " " + string(p.Payload)
		return bus.ProcessResult{Processed: true}, nil
	})
	agent := dial("agent", func(ctx context.Context, c *bus.Client, p bus.ProcessParams) (bus.ProcessResult, error) {
		if _, err := c.Send(ctx, "outbound:1", map[string]string{"type": "plaintext_message", "text": "echo"}); err != nil {
			return bus.ProcessResult{}, err
		}
		return bus.ProcessResult{Processed: true, Message: "echoed"}, nil
	})
	for c, topic := range map[*bus.Client]string{listener: "outbound:*", agent: "inbound:1"} {
		if err := c.Subscribe(ctx, bus.SubscribeParams{Topic: topic}); err != nil {
			t.Fatal(err)
		}
	}
	sender := dial("sender", nil)
	res, err := sender.Send(ctx, "inbound:1", map[string]string{"type": "plaintext_message", "text": "hi"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success || len(res.Acks) != 1 || res.Acks[0].ClientID != "agent" || !res.Acks[0].Processed || res.Acks[0].Message != "echoed" {
		t.Fatalf("acks %+v", res)
	}
	if got := receive(t, replies, "the agent's reply"); got != `outbound:1 {"text":"echo","type":"plaintext_message"}` {
		t.Errorf("listener got %s", got)
	}
	// A payload that is not an object, and a bad pattern, are refused.
	if _, err := sender.Send(ctx, "inbound:1", "text"); err == nil {
		t.Error("a string payload was sent")
	}
	var re *rpc.Error
	if err := sender.Subscribe(ctx, bus.SubscribeParams{Topic: ""}); !errors.As(err, &re) {
		t.Errorf("subscribe to no topic: %v, want an rpc error", err)
	}
}
