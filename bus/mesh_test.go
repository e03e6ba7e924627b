package bus

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// probeMesh is an rpc.IDPublisher whose subscriptions and publishes route a topic on
// the bus from another goroutine before they return: were the bus holding
// a lock route needs while it calls the mesh, they would wait forever.
type probeMesh struct {
	t       *testing.T
	bus     *Bus
	subs    chan string
	publish chan string
}

func (*probeMesh) AgentID() string { return "12D3KooWNmhA9NDeN7QxmnSy3XCuggwjKdFUFur6oAez2Kaioh4a" }

func (*probeMesh) Peers() []protocol.PeerInfo { return nil }

func (*probeMesh) Call(context.Context, protocol.CallRequest) (*protocol.Response, error) {
	return nil, errors.New("no mesh agents here")
}

func (m *probeMesh) probe(what, topic string) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.bus.subs.route(topic)
		m.bus.subs.patterns()
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		m.t.Errorf("the subscription table stayed locked while the bus called the mesh's %s", what)
		<-done
	}
}

func (m *probeMesh) Subscribe(pattern string, _ func(protocol.TopicMessage)) (func(), error) {
	m.probe("Subscribe", pattern)
	m.subs <- pattern
	return func() { m.probe("cancel", pattern) }, nil
}

func (m *probeMesh) SubscribeOwn(pattern string, h func(protocol.TopicMessage)) (func(), error) {
	return m.Subscribe(pattern, h)
}

func (m *probeMesh) Publish(_ context.Context, topic string, _ json.RawMessage, _ *protocol.Filter) (int, error) {
	m.probe("Publish", topic)
	m.publish <- topic
	return 1, nil
}

func (m *probeMesh) PublishID(ctx context.Context, _, topic string, payload json.RawMessage, filter *protocol.Filter) (int, error) {
	return m.Publish(ctx, topic, payload, filter)
}

func TestBusCallsMeshOutsideTableLock(t *testing.T) {
	m := &probeMesh{t: t, subs: make(chan string, 4), publish: make(chan string, 4)}
	log := slog.New(slog.DiscardHandler)
	srv, err := rpc.New(m, rpc.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(srv, m, WithTopics(m), WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	m.bus = b
	hs := httptest.NewServer(srv)
	defer hs.Close()
	defer b.Close()
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/", rpc.WithClientID("probe"),
		rpc.WithRequestHandler(func(context.Context, string, json.RawMessage) (any, error) {
			return ProcessResult{Processed: true}, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Call(ctx, MethodSubscribe, map[string]any{"topic": "job:*"}, nil); err != nil {
		t.Fatal(err)
	}
	if got := <-m.subs; got != "job:*" {
		t.Errorf("mesh subscription to %q", got)
	}
	var res SendResult
	if err := c.Call(ctx, MethodSendMessage, map[string]any{"topic": "job:1", "payload": map[string]any{"type": "event"}}, &res); err != nil || !res.Success {
		t.Fatalf("sendMessage: %+v, %v", res, err)
	}
	if got := <-m.publish; got != "job:1" {
		t.Errorf("published on %q", got)
	}
	if err := c.Call(ctx, MethodUnsubscribe, map[string]any{"topic": "job:*"}, nil); err != nil {
		t.Fatal(err)
	}
}
