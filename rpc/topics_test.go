package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// topicMesh adds topics to the fake mesh: Publish delivers to its own
// subscribers whose pattern is the topic or ends in '*' matching it, in
// the order they subscribed, and fails with ErrNoPeers when there are
// none. A pattern starting with "retained:" is handed two messages
// (payloads {"retained":1} and {"retained":2}) before Subscribe returns.
// A pattern starting with "slow:" signals held, then waits for release.
type topicMesh struct {
	*fakemesh.Mesh
	held      chan struct{}
	release   chan struct{}
	mu        sync.Mutex
	subs      map[int]topicSub
	next      int
	cancelled int
	filters   []*protocol.Filter
	// freshIDs gives every published message a fresh id, as the real
	// mesh does (the bus drops a mesh message id it has seen); without
	// it every id is "id", which the transcripts pin.
	freshIDs bool
}

type topicSub struct {
	pattern string
	handler func(protocol.TopicMessage)
}

func newTopicMesh() *topicMesh {
	return &topicMesh{Mesh: fakemesh.New(), subs: map[int]topicSub{}, held: make(chan struct{}, 1), release: make(chan struct{})}
}

func (m *topicMesh) Publish(ctx context.Context, topic string, payload json.RawMessage, filter *protocol.Filter) (int, error) {
	id := "id"
	if m.freshIDs {
		id = protocol.NewID()
	}
	return m.PublishID(ctx, id, topic, payload, filter)
}

func (m *topicMesh) PublishID(_ context.Context, id, topic string, payload json.RawMessage, filter *protocol.Filter) (int, error) {
	if strings.ContainsAny(topic, "*?") {
		return 0, protocol.Errorf(protocol.CodeInvalidMessage, "cannot publish to the pattern %q", topic)
	}
	m.mu.Lock()
	m.filters = append(m.filters, filter)
	var hs []func(protocol.TopicMessage)
	for _, id := range slices.Sorted(maps.Keys(m.subs)) {
		s := m.subs[id]
		if s.pattern == topic || strings.HasSuffix(s.pattern, "*") && strings.HasPrefix(topic, strings.TrimSuffix(s.pattern, "*")) {
			hs = append(hs, s.handler)
		}
	}
	m.mu.Unlock()
	if len(hs) == 0 {
		return 0, fmt.Errorf("after 5s: %w", protocol.ErrNoPeers)
	}
	for _, h := range hs {
		h(protocol.TopicMessage{Topic: topic, From: "publisher", Payload: payload, Time: time.Unix(1700000000, 0).UTC(), ID: id})
	}
	return len(hs), nil
}

func (m *topicMesh) Subscribe(pattern string, handler func(protocol.TopicMessage)) (func(), error) {
	if strings.HasPrefix(pattern, "*") {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "pattern %q: the family before ':' must be literal", pattern)
	}
	if strings.HasPrefix(pattern, "slow:") {
		m.held <- struct{}{}
		<-m.release
	}
	m.mu.Lock()
	m.next++
	id := m.next
	m.subs[id] = topicSub{pattern, handler}
	m.mu.Unlock()
	if strings.HasPrefix(pattern, "retained:") {
		for i := 1; i <= 2; i++ {
			handler(protocol.TopicMessage{Topic: "retained:x", From: "publisher", Payload: json.RawMessage(fmt.Sprintf(`{"retained":%d}`, i)), Time: time.Unix(1700000000, 0).UTC(), ID: "id"})
		}
	}
	return func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if _, ok := m.subs[id]; ok {
			delete(m.subs, id)
			m.cancelled++
		}
	}, nil
}

// SubscribeOwn is Subscribe: the fake counts every subscription.
func (m *topicMesh) SubscribeOwn(pattern string, handler func(protocol.TopicMessage)) (func(), error) {
	return m.Subscribe(pattern, handler)
}

func (m *topicMesh) counts() (live, cancelled int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.subs), m.cancelled
}

func topicServer(t *testing.T, mesh *topicMesh, opts ...rpc.Option) string {
	t.Helper()
	return serveMesh(t, mesh, mesh.Mesh, append([]rpc.Option{rpc.WithTopics(mesh)}, opts...)...).url
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
	var re *rpc.Error
	if err := sub.Unsubscribe(ctxT(t), id); !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams {
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
	c, err := rpc.Dial(ctxT(t), url)
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
	for i := range rpc.MaxMeshSubscriptions {
		if _, err := c.Subscribe(ctxT(t), fmt.Sprintf("t:%d", i), func(protocol.TopicMessage) {}); err != nil {
			t.Fatalf("subscription %d: %v", i, err)
		}
	}
	_, err := c.Subscribe(ctxT(t), "t:over", func(protocol.TopicMessage) {})
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, "unsubscribe first") {
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

// TestSubscribeEarlyMessages checks that messages the server sends before
// the mesh.subscribe response reach the handler, in order, before later
// ones.
func TestSubscribeEarlyMessages(t *testing.T) {
	mesh := newTopicMesh()
	url := topicServer(t, mesh)
	c := dialClient(t, url)
	var got collector
	if _, err := c.Subscribe(ctxT(t), "retained:*", got.add); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctxT(t), "retained:3", json.RawMessage(`{"retained":3}`), nil, 0); err != nil {
		t.Fatal(err)
	}
	wait.For(t, testTimeout, func() error {
		if p := got.payloads(); p != `{"retained":1} {"retained":2} {"retained":3}` {
			return fmt.Errorf("received %q, want retained 1, 2, 3 in order", p)
		}
		return nil
	})
}

// TestUnsubscribeDropsLateMessages checks that after Unsubscribe returns
// the handler sees nothing more, even a message the server queued for the
// subscription afterwards, and that a second subscription to the same
// pattern still gets its messages.
func TestUnsubscribeDropsLateMessages(t *testing.T) {
	mesh := newTopicMesh()
	c := dialClient(t, topicServer(t, mesh))
	var first, second collector
	id1, err := c.Subscribe(ctxT(t), "a:*", first.add)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(ctxT(t), "a:*", second.add); err != nil {
		t.Fatal(err)
	}
	// Keep the mesh handler of the first subscription past Unsubscribe,
	// as a message in flight in the mesh would be.
	mesh.mu.Lock()
	late := mesh.subs[1].handler
	mesh.mu.Unlock()
	if err := c.Unsubscribe(ctxT(t), id1); err != nil {
		t.Fatal(err)
	}
	late(protocol.TopicMessage{Topic: "a:late", Payload: json.RawMessage(`{"late":true}`)})
	if _, err := c.Publish(ctxT(t), "a:1", json.RawMessage(`{"n":1}`), nil, 0); err != nil {
		t.Fatal(err)
	}
	wait.For(t, testTimeout, func() error {
		if p := second.payloads(); p != `{"n":1}` {
			return fmt.Errorf("second subscription received %q", p)
		}
		return nil
	})
	// The late message was queued before the publish, so it has been read.
	if p := first.payloads(); p != "" {
		t.Errorf("unsubscribed handler received %q", p)
	}
}

// TestSlowSubscriberDisconnected checks that a subscriber that stops
// reading never blocks the mesh: its notifications are queued without
// waiting, and when its queue is full it is disconnected and its mesh
// subscription cancelled.
func TestSlowSubscriberDisconnected(t *testing.T) {
	l := rpc.DefaultLimits()
	l.SendQueue = 4
	l.WriteTimeout = 500 * time.Millisecond
	mesh := newTopicMesh()
	mesh.freshIDs = true // the same message over and over must not be dropped as seen
	url := topicServer(t, mesh, rpc.WithLimits(l))
	slow := dialRaw(t, url)
	writeFrame(t, slow, `{"jsonrpc":"2.0","id":1,"method":"mesh.subscribe","params":{"pattern":"flood:*"}}`)
	if got := readFrame(t, slow); !strings.Contains(got, `"subscription":"s1"`) {
		t.Fatalf("subscribe: %s", got)
	}
	// slow never reads again.
	pub := dialClient(t, url)
	payload := json.RawMessage(`{"pad":"` + strings.Repeat("x", 64<<10) + `"}`)
	// The loopback socket absorbs megabytes before a write blocks, and
	// under the race detector each 64 KiB publish takes about 0.15 s, so
	// filling it takes close to 10 s there: allow a generous deadline.
	wait.For(t, 6*testTimeout, func() error {
		// The fake delivers synchronously: a blocking Notify would hang
		// this Publish.
		if _, err := pub.Publish(ctxT(t), "flood:1", payload, nil, 0); err != nil && !errors.Is(err, protocol.ErrNoPeers) {
			t.Fatalf("publish: %v", err)
		}
		if live, cancelled := mesh.counts(); live != 0 || cancelled != 1 {
			return fmt.Errorf("%d live, %d cancelled subscriptions; want the slow one cancelled", live, cancelled)
		}
		return nil
	})
}

// TestSubscribeGivenUp checks that a subscription the server makes after
// the client's Subscribe gave up is cancelled, not left running.
func TestSubscribeGivenUp(t *testing.T) {
	mesh := newTopicMesh()
	c := dialClient(t, topicServer(t, mesh))
	ctx, cancel := context.WithCancel(ctxT(t))
	errc := make(chan error, 1)
	go func() {
		_, err := c.Subscribe(ctx, "slow:*", func(protocol.TopicMessage) { t.Error("handler called") })
		errc <- err
	}()
	receive(t, mesh.held, "the mesh's Subscribe")
	cancel()
	if err := receive(t, errc, "Subscribe to give up"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe: %v, want context.Canceled", err)
	}
	close(mesh.release)
	wait.For(t, testTimeout, func() error {
		if live, cancelled := mesh.counts(); live != 0 || cancelled != 1 {
			return fmt.Errorf("%d live, %d cancelled subscriptions; want the given-up one cancelled", live, cancelled)
		}
		return nil
	})
	// The connection is still good, and a publish reaches nobody.
	if _, err := c.Publish(ctxT(t), "slow:1", json.RawMessage(`{}`), nil, 0); !errors.Is(err, protocol.ErrNoPeers) {
		t.Fatalf("Publish: %v, want ErrNoPeers", err)
	}
}
