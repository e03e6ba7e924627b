package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/relay"
)

// topicMesh adds topics to the fake mesh: Publish delivers to its own
// subscribers whose pattern is the topic or ends in '*' matching it, and
// fails with ErrNoPeers when there are none.
type topicMesh struct {
	*fakeMesh
	mu        sync.Mutex
	subs      map[int]topicSub
	next      int
	cancelled int
	filters   []*protocol.Filter
}

type topicSub struct {
	pattern string
	handler func(protocol.TopicMessage)
}

func newTopicMesh() *topicMesh { return &topicMesh{fakeMesh: newFakeMesh(), subs: map[int]topicSub{}} }

func (m *topicMesh) Publish(_ context.Context, topic string, payload json.RawMessage, filter *protocol.Filter) (int, error) {
	if strings.ContainsAny(topic, "*?") {
		return 0, protocol.Errorf(protocol.CodeInvalidMessage, "cannot publish to the pattern %q", topic)
	}
	m.mu.Lock()
	m.filters = append(m.filters, filter)
	var hs []func(protocol.TopicMessage)
	for _, s := range m.subs {
		if s.pattern == topic || strings.HasSuffix(s.pattern, "*") && strings.HasPrefix(topic, strings.TrimSuffix(s.pattern, "*")) {
			hs = append(hs, s.handler)
		}
	}
	m.mu.Unlock()
	if len(hs) == 0 {
		return 0, fmt.Errorf("after 5s: %w", protocol.ErrNoPeers)
	}
	for _, h := range hs {
		h(protocol.TopicMessage{Topic: topic, From: "publisher", Payload: payload, Time: time.Unix(1700000000, 0).UTC(), ID: "id"})
	}
	return len(hs), nil
}

func (m *topicMesh) Subscribe(pattern string, handler func(protocol.TopicMessage)) (func(), error) {
	if strings.HasPrefix(pattern, "*") {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "pattern %q: the family before ':' must be literal", pattern)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.next++
	id := m.next
	m.subs[id] = topicSub{pattern, handler}
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, ok := m.subs[id]; ok {
			delete(m.subs, id)
			m.cancelled++
		}
	}, nil
}

func (m *topicMesh) counts() (live, cancelled int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.subs), m.cancelled
}

func topicServer(t *testing.T, mesh relay.Mesh) string {
	t.Helper()
	srv, err := relay.New(mesh, relay.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		hs.Close()
	})
	return "ws" + strings.TrimPrefix(hs.URL, "http") + "/"
}

// collector gathers the messages handed to a subscription handler.
type collector struct {
	mu   sync.Mutex
	msgs []protocol.TopicMessage
}

func (c *collector) add(m protocol.TopicMessage) {
	c.mu.Lock()
	c.msgs = append(c.msgs, m)
	c.mu.Unlock()
}

func (c *collector) payloads() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, m := range c.msgs {
		out = append(out, string(m.Payload))
	}
	return strings.Join(out, " ")
}

func TestPublishSubscribe(t *testing.T) {
	mesh := newTopicMesh()
	url := topicServer(t, mesh)
	sub, pub := dialClient(t, url), dialClient(t, url)

	var got collector
	id, err := sub.Subscribe(ctxT(t), "outbound:*", got.add)
	if err != nil || id == "" {
		t.Fatalf("Subscribe: %q %v", id, err)
	}
	for i := range 3 {
		n, err := pub.Publish(ctxT(t), fmt.Sprintf("outbound:%d", i), json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)), nil, 0)
		if err != nil || n != 1 {
			t.Fatalf("Publish %d: %d peers, %v", i, n, err)
		}
	}
	wait.For(t, 10*time.Second, func() error {
		if p := got.payloads(); p != `{"i":0} {"i":1} {"i":2}` {
			return fmt.Errorf("received %q, want i 0, 1, 2 in order", p)
		}
		return nil
	})
	got.mu.Lock()
	m := got.msgs[2]
	got.mu.Unlock()
	if m.Topic != "outbound:2" || m.From != "publisher" || m.ID != "id" || m.Time.IsZero() {
		t.Errorf("message %+v", m)
	}

	filter := &protocol.Filter{IncludeAgents: []string{"A"}, PersonaTypes: []string{"qa"}}
	if _, err := pub.Publish(ctxT(t), "outbound:f", json.RawMessage(`{}`), filter, time.Second); err != nil {
		t.Fatal(err)
	}
	mesh.mu.Lock()
	passed := mesh.filters[len(mesh.filters)-1]
	mesh.mu.Unlock()
	if passed == nil || passed.IncludeAgents[0] != "A" || passed.PersonaTypes[0] != "qa" {
		t.Errorf("filter reached the mesh as %+v", passed)
	}

	if err := sub.Unsubscribe(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	if live, _ := mesh.counts(); live != 0 {
		t.Fatalf("%d mesh subscriptions after unsubscribe", live)
	}
	_, err = pub.Publish(ctxT(t), "outbound:9", json.RawMessage(`{}`), nil, 0)
	if !errors.Is(err, protocol.ErrNoPeers) {
		t.Fatalf("publish without subscribers: %v, want ErrNoPeers", err)
	}
	var re *relay.RPCError
	if err := sub.Unsubscribe(ctxT(t), id); !errors.As(err, &re) || re.Code != relay.CodeInvalidParams {
		t.Fatalf("second unsubscribe: %v, want -32602", err)
	}
	_, err = pub.Publish(ctxT(t), "outbound:*", json.RawMessage(`{}`), nil, 0)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidMessage {
		t.Fatalf("publish to a pattern: %v, want INVALID_MESSAGE", err)
	}
}

// TestSubscriptionsEndWithConnection checks that the mesh subscriptions of
// a connection are cancelled when it closes.
func TestSubscriptionsEndWithConnection(t *testing.T) {
	mesh := newTopicMesh()
	url := topicServer(t, mesh)
	c, err := relay.Dial(ctxT(t), url)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"a:*", "b:x", "a:*"} {
		if _, err := c.Subscribe(ctxT(t), p, func(protocol.TopicMessage) {}); err != nil {
			t.Fatal(err)
		}
	}
	if live, _ := mesh.counts(); live != 3 {
		t.Fatalf("%d live subscriptions, want 3", live)
	}
	_ = c.Close()
	wait.For(t, 10*time.Second, func() error {
		if live, cancelled := mesh.counts(); live != 0 || cancelled != 3 {
			return fmt.Errorf("%d live, %d cancelled; want 0 and 3", live, cancelled)
		}
		return nil
	})
}

func TestSubscriptionLimit(t *testing.T) {
	mesh := newTopicMesh()
	c := dialClient(t, topicServer(t, mesh))
	for i := range relay.MaxMeshSubscriptions {
		if _, err := c.Subscribe(ctxT(t), fmt.Sprintf("t:%d", i), func(protocol.TopicMessage) {}); err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
	}
	_, err := c.Subscribe(ctxT(t), "t:over", func(protocol.TopicMessage) {})
	var re *relay.RPCError
	if !errors.As(err, &re) || re.Code != relay.CodeInvalidParams || !strings.Contains(re.Message, "unsubscribe first") {
		t.Fatalf("subscription over the limit: %v", err)
	}
}

func TestTopicParams(t *testing.T) {
	ws := dialRaw(t, topicServer(t, newTopicMesh()))
	for _, tc := range []struct{ method, params, want string }{
		{"mesh.publish", `{}`, `"topic\" is required`},
		{"mesh.publish", `{"topic":"a:b"}`, `"payload\" is required`},
		{"mesh.publish", `{"topic":"a:b","payload":[1]}`, `must be a JSON object`},
		{"mesh.publish", `{"topic":"","payload":{}}`, `is empty`},
		{"mesh.publish", `{"topic":7,"payload":{}}`, `must be a string`},
		{"mesh.publish", `{"topic":"a:b","payload":{},"extra":1}`, `unknown field`},
		{"mesh.publish", `{"topic":"a:b","payload":{},"filter":{"nope":[]}}`, `"filter\" must be an object`},
		{"mesh.publish", `{"topic":"a:b","payload":{},"filter":[1]}`, `"filter\" must be an object`},
		{"mesh.publish", `{"topic":"a:b","payload":{},"timeoutMs":0}`, `timeoutMs`},
		{"mesh.publish", `{"topic":"` + strings.Repeat("x", 2000) + `","payload":{}}`, `longer than`},
		{"mesh.publish", `[1]`, `takes an object`},
		{"mesh.subscribe", `{}`, `"pattern\" is required`},
		{"mesh.subscribe", `{"pattern":"*"}`, `must be literal`},
		{"mesh.subscribe", `{"pattern":"a:*","x":1}`, `unknown field`},
		{"mesh.unsubscribe", `{"subscription":"s99"}`, `no mesh subscription`},
		{"mesh.unsubscribe", `["s1"]`, `takes an object`},
	} {
		writeFrame(t, ws, `{"jsonrpc":"2.0","id":1,"method":"`+tc.method+`","params":`+tc.params+`}`)
		got := readFrame(t, ws)
		if !strings.Contains(got, `-32602`) || !strings.Contains(got, tc.want) {
			t.Errorf("%s %s: got %s, want -32602 mentioning %q", tc.method, tc.params, got, tc.want)
		}
	}
	writeFrame(t, ws, `{"jsonrpc":"2.0","id":2,"method":"mesh.publish","params":{"topic":"none:x","payload":{}}}`)
	if got := readFrame(t, ws); !strings.Contains(got, `-32007`) || !strings.Contains(got, `no agent subscribes to \"none:x\"`) {
		t.Errorf("no peers: got %s, want -32007", got)
	}
}

func TestTopicsWithoutPublisher(t *testing.T) {
	ws := dialRaw(t, newTestServer(t).url)
	for _, m := range []string{"mesh.publish", "mesh.subscribe", "mesh.unsubscribe"} {
		writeFrame(t, ws, `{"jsonrpc":"2.0","id":1,"method":"`+m+`","params":{}}`)
		if got := readFrame(t, ws); !strings.Contains(got, `-32601`) {
			t.Errorf("%s: got %s, want -32601", m, got)
		}
	}
}
