package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// The bus conformance suite, written from seed 001: every method, error
// code and policy, ordering and shadowing, retry then dead letter, the
// default handler, base-protocol clients, and a restart that loses
// nothing acknowledged.

// fastBus retries quickly so that retry tests take milliseconds.
func fastBus() bus.Option { return withConfig(fastConfig()) }

// fastConfig is fastBus's configuration, for tests that change it.
func fastConfig() bus.Config {
	c := bus.DefaultConfig()
	c.RetryBackoff, c.MaxBackoff, c.DeliveryTimeout = 20*time.Millisecond, 100*time.Millisecond, 2*time.Second
	return c
}

// withConfig sets the bus's tuning (not its topics, store, logger or clock) to
// those of cfg.
func withConfig(cfg bus.Config) bus.Option {
	return func(c *bus.Config) error {
		cfg.Topics, cfg.Store, cfg.Logger, cfg.Now = c.Topics, c.Store, c.Logger, c.Now
		*c = cfg
		return nil
	}
}

// busServer serves a bus over mesh (a fake) with store st (nil for none),
// retrying quickly (fastBus) unless opts say otherwise.
func busServer(t *testing.T, mesh rpc.Mesh, st *store.Store, opts ...bus.Option) (*rpctest.Stack, string) {
	t.Helper()
	s := rpctest.Start(t, mesh, rpctest.WithBus(append([]bus.Option{fastBus(), bus.WithStore(st)}, opts...)...))
	return s.Stack, s.URL
}

func openStore(t *testing.T, path string) *store.Store {
	t.Helper()
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// delivery is one processMessage (or sendMessage) a peer received.
type delivery struct {
	method string
	topic  string
	text   string
}

// peer is a bus client that records what it is given and answers with
// answer (default: processed).
type peer struct {
	*rpc.Client
	id     string
	mu     sync.Mutex
	got    []delivery
	answer func(d delivery) (any, error)
	notify chan struct{}
}

func newPeer(t *testing.T, url, id string, answer func(delivery) (any, error)) *peer {
	t.Helper()
	p := &peer{id: id, answer: answer, notify: make(chan struct{}, 1)}
	init := rpc.WithoutInitialize()
	if id != "" {
		init = rpc.WithClientID(id)
	}
	p.Client = dialClient(t, url, init, rpc.WithClientInfo(rpc.ClientInfo{Name: "test", Version: "1"}), rpc.WithRequestHandler(func(_ context.Context, method string, params json.RawMessage) (any, error) {
		var pp struct {
			Topic   string `json:"topic"`
			Payload struct {
				Text string `json:"text"`
			} `json:"payload"`
		}
		_ = json.Unmarshal(params, &pp)
		d := delivery{method, pp.Topic, pp.Payload.Text}
		p.mu.Lock()
		p.got = append(p.got, d)
		p.mu.Unlock()
		select {
		case p.notify <- struct{}{}:
		default:
		}
		if p.answer != nil {
			return p.answer(d)
		}
		return map[string]any{"processed": true, "message": "ok from " + id}, nil
	}))
	return p
}

func (p *peer) texts() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, d := range p.got {
		out = append(out, d.text)
	}
	return out
}

func (p *peer) subscribe(t *testing.T, params map[string]any) {
	t.Helper()
	var res bus.SuccessResult
	if err := p.Call(ctxT(t), "subscribe", params, &res); err != nil || !res.Success {
		t.Fatalf("%s subscribe %v: %+v %v", p.id, params, res, err)
	}
}

func (p *peer) send(t *testing.T, topic, text string) bus.SendResult {
	t.Helper()
	var res bus.SendResult
	if err := p.Call(ctxT(t), "sendMessage", map[string]any{"topic": topic, "payload": map[string]any{"type": "plaintext_message", "text": text}}, &res); err != nil {
		t.Fatalf("%s sendMessage %s: %v", p.id, topic, err)
	}
	return res
}

func rpcCode(err error) int {
	var re *rpc.Error
	if errors.As(err, &re) {
		return re.Code
	}
	return 0
}

func ackIDs(res bus.SendResult) string {
	var ids []string
	for _, a := range res.Acks {
		ids = append(ids, fmt.Sprintf("%s=%v", a.ClientID, a.Processed))
	}
	return strings.Join(ids, " ")
}

func TestBusInitialize(t *testing.T) {
	_, url := busServer(t, fakemesh.New(), nil)
	c := newPeer(t, url, "", nil)
	for _, m := range []string{"subscribe", "unsubscribe", "sendMessage"} {
		err := c.Call(ctxT(t), m, map[string]any{"topic": "x"}, nil)
		if rpcCode(err) != rpc.CodeNotInitialized {
			t.Errorf("%s before initialize: %v, want -32006", m, err)
		}
	}
	for _, tc := range []struct {
		name   string
		params any
	}{
		{"no params", nil},
		{"no clientId", map[string]any{"clientInfo": map[string]string{"name": "x"}}},
		{"clientId not a string", map[string]any{"clientId": 5}},
		{"empty clientId", map[string]any{"clientId": ""}},
		{"clientInfo without name", map[string]any{"clientId": "a", "clientInfo": map[string]string{"version": "1"}}},
		{"clientInfo not an object", map[string]any{"clientId": "a", "clientInfo": "bub"}},
		{"unknown field", map[string]any{"clientId": "a", "extra": 1}},
	} {
		if err := c.Call(ctxT(t), "initialize", tc.params, nil); rpcCode(err) != rpc.CodeInvalidClientInfo {
			t.Errorf("%s: %v, want -32002", tc.name, err)
		}
	}
	var res rpc.InitializeResult
	if err := c.Call(ctxT(t), "initialize", map[string]any{"clientId": "agent-1", "clientInfo": map[string]string{"name": "bub", "version": "0.2.0"}}, &res); err != nil {
		t.Fatal(err)
	}
	if res.ServerID != selfID || !res.Capabilities.Subscribe || !res.Capabilities.Publish || res.ServerInfo.Name == "" {
		t.Errorf("initialize result %+v", res)
	}
	if err := c.Call(ctxT(t), "initialize", map[string]any{"clientId": "agent-1"}, nil); rpcCode(err) != rpc.CodeAlreadyInitialized {
		t.Errorf("second initialize: %v, want -32001", err)
	}
}

func TestBusSubscribeErrors(t *testing.T) {
	_, url := busServer(t, fakemesh.New(), nil)
	c := newPeer(t, url, "a", nil)
	for _, tc := range []struct {
		method string
		params any
		code   int
	}{
		{"subscribe", map[string]any{}, rpc.CodeInvalidRequest},
		{"subscribe", nil, rpc.CodeInvalidRequest},
		{"subscribe", map[string]any{"topic": 3}, rpc.CodeInvalidRequest},
		{"subscribe", map[string]any{"topic": "a:*", "policy": "whenever"}, rpc.CodeInvalidParams},
		{"subscribe", map[string]any{"topic": "a:[", "policy": "continueAll"}, rpc.CodeInvalidParams},
		{"unsubscribe", map[string]any{"topic": "never:*"}, rpc.CodeSubscriptionNotFound},
		{"sendMessage", map[string]any{"topic": "a:1"}, rpc.CodeInvalidParams},
		{"sendMessage", map[string]any{"topic": "a:1", "payload": []int{1}}, rpc.CodeInvalidParams},
		{"sendMessage", map[string]any{"topic": "a:*", "payload": map[string]any{}}, rpc.CodeInvalidParams},
		{"sendMessage", map[string]any{"payload": map[string]any{}}, rpc.CodeInvalidRequest},
	} {
		if err := c.Call(ctxT(t), tc.method, tc.params, nil); rpcCode(err) != tc.code {
			t.Errorf("%s %v: %v, want %d", tc.method, tc.params, err, tc.code)
		}
	}
	c.subscribe(t, map[string]any{"topic": "inbound:*"})
	if err := c.Call(ctxT(t), "subscribe", map[string]any{"topic": "inbound:*"}, nil); rpcCode(err) != rpc.CodeAlreadySubscribed {
		t.Errorf("second subscribe: %v, want -32003", err)
	}
	if err := c.Call(ctxT(t), "unsubscribe", map[string]any{"topic": "inbound:*"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Call(ctxT(t), "unsubscribe", map[string]any{"topic": "inbound:*"}, nil); rpcCode(err) != rpc.CodeSubscriptionNotFound {
		t.Errorf("unsubscribe twice: %v, want -32004", err)
	}
}

// TestPayloadTypeMandatory: seed 001 makes a payload's "type" mandatory,
// a string; sendMessage refuses a payload without one with -32602 before
// anything is delivered, and a subscriber sees only the valid ones.
func TestPayloadTypeMandatory(t *testing.T) {
	_, url := busServer(t, fakemesh.New(), nil)
	sub := newPeer(t, url, "sub", nil)
	sub.subscribe(t, map[string]any{"topic": "typed:*"})
	sender := newPeer(t, url, "sender", nil)
	for _, tc := range []struct {
		payload string
		ok      bool
	}{
		{`{}`, false},
		{`{"text":"hi"}`, false},
		{`{"type":5}`, false},
		{`{"type":null}`, false},
		{`{"type":""}`, false},
		{`{"type":["a"]}`, false},
		{`{"type":{"a":1}}`, false},
		{`{"type":true,"text":"hi"}`, false},
		{`{"type":"a","type":"b"}`, false},
		{`{"type":"plaintext_message"}`, true},
		{`{"type":"task_request","text":"hi","extra":{"n":1}}`, true},
	} {
		var res bus.SendResult
		err := sender.Call(ctxT(t), bus.MethodSendMessage, map[string]any{"topic": "typed:1", "payload": json.RawMessage(tc.payload)}, &res)
		switch {
		case tc.ok && (err != nil || !res.Success):
			t.Errorf("payload %s: %+v %v, want delivered", tc.payload, res, err)
		case !tc.ok && rpcCode(err) != rpc.CodeInvalidParams:
			t.Errorf("payload %s: %+v %v, want -32602", tc.payload, res, err)
		}
	}
	waitFor(t, "the two typed messages", func() bool { return len(sub.texts()) >= 2 })
	if got := sub.texts(); len(got) != 2 {
		t.Errorf("the subscriber got %d messages, want the 2 typed ones", len(got))
	}
}

// TestBusOrderAndShadowing is seed 001's "last match wins" example.
func TestBusOrderAndShadowing(t *testing.T) {
	_, url := busServer(t, fakemesh.New(), nil)
	a, b, c := newPeer(t, url, "A", nil), newPeer(t, url, "B", nil), newPeer(t, url, "C", nil)
	all := map[string]any{"policy": "continueAll"}
	sub := func(p *peer, topic string) {
		params := map[string]any{"topic": topic}
		for k, v := range all {
			params[k] = v
		}
		p.subscribe(t, params)
	}
	sub(a, "inbound:*")
	sub(b, "inbound:critical")
	sub(c, "inbound:*") // shadows A's
	sender := newPeer(t, url, "sender", nil)
	if got := ackIDs(sender.send(t, "inbound:critical", "m1")); got != "C=true B=true" {
		t.Errorf("inbound:critical went to %q, want C then B", got)
	}
	if got := ackIDs(sender.send(t, "inbound:normal", "m2")); got != "C=true" {
		t.Errorf("inbound:normal went to %q, want C only", got)
	}
	if len(a.texts()) != 0 {
		t.Errorf("shadowed A received %v", a.texts())
	}
	// C leaves: A's subscription resumes.
	_ = c.Close()
	waitFor(t, "A to resume", func() bool { return ackIDs(sender.send(t, "inbound:normal", "m3")) == "A=true" })
	// Prefix patterns (seed 001: "inbound:chat-" matches inbound:chat-1).
	d := newPeer(t, url, "D", nil)
	d.subscribe(t, map[string]any{"topic": "room:chat-"})
	if got := ackIDs(sender.send(t, "room:chat-7", "m4")); got != "D=true" {
		t.Errorf("prefix pattern: %q", got)
	}
	if res := sender.send(t, "room:chat", "m5"); res.Success {
		t.Errorf("room:chat is not under the prefix room:chat-: %+v", res)
	}
}

func TestBusPolicies(t *testing.T) {
	answers := map[string]map[string]any{
		"P1": {"processed": true},
		"P2": {"processed": false, "stopPropagation": true},
		"P3": {"processed": true},
	}
	for _, tc := range []struct {
		policy string
		want   string
		stop   bool
	}{
		// Delivery order is newest first: P3, P2, P1.
		{"stopPropagationOnProcessed", "P3=true", true},
		{"stopPropagationOnStop", "P3=true P2=false", true},
		{"continueAll", "P3=true P2=false P1=true", false},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			_, url := busServer(t, fakemesh.New(), nil)
			// Three patterns matching job:p (one pattern each: the same
			// pattern twice would shadow).
			patterns := map[string]string{"P1": "job:*", "P2": "job:p*", "P3": "job:p"}
			for _, id := range []string{"P1", "P2", "P3"} {
				p := newPeer(t, url, id, func(delivery) (any, error) { return answers[id], nil })
				p.subscribe(t, map[string]any{"topic": patterns[id], "policy": tc.policy})
			}
			res := newPeer(t, url, "sender", nil).send(t, "job:p", "x")
			if got := ackIDs(res); got != tc.want || res.StopPropagation != tc.stop || !res.Success {
				t.Errorf("acks %q stop %v, want %q stop %v", got, res.StopPropagation, tc.want, tc.stop)
			}
		})
	}
}

func TestBusNoSubscriber(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "bus.db"))
	_, url := busServer(t, fakemesh.New(), st)
	res := newPeer(t, url, "sender", nil).send(t, "nobody:1", "lost?")
	if res.Success || len(res.Acks) != 0 {
		t.Errorf("result %+v, want success false and no acks", res)
	}
	dls, err := st.DeadLetters(ctxT(t), store.DLQFilter{})
	if err != nil || len(dls) != 1 || dls[0].Topic != "nobody:1" || !strings.Contains(dls[0].Reason, "no subscriber") {
		t.Fatalf("dead letters %+v %v", dls, err)
	}
}

// TestBusRetryThenDeadLetter: a subscriber that keeps asking for a retry
// gets MaxAttempts deliveries, then the message is a dead letter; replay
// delivers it again.
func TestBusRetryThenDeadLetter(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "bus.db"))
	_, url := busServer(t, fakemesh.New(), st)
	var mu sync.Mutex
	ready := false
	flaky := newPeer(t, url, "flaky", func(delivery) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		if ready {
			return map[string]any{"processed": true}, nil
		}
		return map[string]any{"processed": false, "should_retry": true, "retry_seconds": 0, "message": "busy"}, nil
	})
	flaky.subscribe(t, map[string]any{"topic": "task:*"})
	sender := newPeer(t, url, "sender", nil)
	res := sender.send(t, "task:1", "work")
	if len(res.Acks) != 1 || res.Acks[0].Processed || !res.Acks[0].Retrying {
		t.Fatalf("first attempt ack %+v, want not processed, retrying", res.Acks)
	}
	var dls []bus.StoredMessage
	waitFor(t, "the dead letter", func() bool {
		dls = nil
		_ = sender.Call(ctxT(t), "bus.deadLetters", map[string]any{}, &dls)
		return len(dls) == 1
	})
	if n := len(flaky.texts()); n != 3 {
		t.Errorf("%d deliveries before the dead letter, want 3 (seed 001: attempts 1, 2, 3)", n)
	}
	if dls[0].Topic != "task:1" || dls[0].To != "flaky" || dls[0].Attempts != 3 || !strings.Contains(dls[0].Reason, "busy") {
		t.Errorf("dead letter %+v", dls[0])
	}
	mu.Lock()
	ready = true
	mu.Unlock()
	if err := sender.Call(ctxT(t), "bus.replay", map[string]any{"id": dls[0].ID}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the replayed delivery", func() bool { return len(flaky.texts()) == 4 })
	waitFor(t, "an empty outbox", func() bool {
		p, _ := st.Pending(ctxT(t), 10)
		return len(p) == 0
	})
	if err := sender.Call(ctxT(t), "bus.replay", map[string]any{"id": dls[0].ID}, nil); rpcCode(err) != rpc.CodeInvalidParams ||
		!strings.Contains(err.Error(), fmt.Sprintf("no dead letter %q (bus.deadLetters lists them)", dls[0].ID)) {
		t.Errorf("second replay: %v, want -32602 naming the id", err)
	}
	// History is written in the background.
	waitFor(t, "the message in history", func() bool {
		var hist []bus.StoredMessage
		err := sender.Call(ctxT(t), "bus.history", map[string]any{"topic": "task:*", "agent": "sender"}, &hist)
		return err == nil && len(hist) == 1 && hist[0].ID == res.MessageID
	})
}

// TestBusDefaultHandler is seed 001's default handler flow: nobody
// subscribes to tg:123, the default handler spawns an agent that
// subscribes, asks for a retry, and the retry reaches the agent.
func TestBusDefaultHandler(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "bus.db"))
	_, url := busServer(t, fakemesh.New(), st)
	spawned := make(chan *peer, 1)
	handler := newPeer(t, url, "default-handler", func(d delivery) (any, error) {
		agent := newPeer(t, url, "agent-for-"+d.topic, nil)
		agent.subscribe(t, map[string]any{"topic": d.topic})
		spawned <- agent
		return map[string]any{"processed": false, "should_retry": true, "retry_seconds": 0, "message": "spawned an agent"}, nil
	})
	handler.subscribe(t, map[string]any{"topic": "tg:*", "defaultHandler": true})
	bridge := newPeer(t, url, "telegram-bridge", nil)
	res := bridge.send(t, "tg:123", "hello")
	if !res.Success || len(res.Acks) != 1 || res.Acks[0].ClientID != "default-handler" || !res.Acks[0].Retrying {
		t.Fatalf("result %+v", res)
	}
	agent := receive(t, spawned, "the spawned agent")
	waitFor(t, "the retried delivery to the agent", func() bool { return strings.Join(agent.texts(), ",") == "hello" })
	// Now routed: the default handler is not asked again.
	if got := ackIDs(bridge.send(t, "tg:123", "again")); got != "agent-for-tg:123=true" {
		t.Errorf("second message went to %q", got)
	}
	if n := len(handler.texts()); n != 1 {
		t.Errorf("default handler invoked %d times, want 1", n)
	}
}

// TestBusBaseProtocolClient: a client that does not know processMessage
// (seed 001's base protocol) gets deliveries as sendMessage.
func TestBusBaseProtocolClient(t *testing.T) {
	_, url := busServer(t, fakemesh.New(), nil)
	old := newPeer(t, url, "old", func(d delivery) (any, error) {
		if d.method == "processMessage" {
			return nil, rpc.Errorf(rpc.CodeMethodNotFound, "method not found")
		}
		return map[string]any{"success": true, "stopPropagation": false}, nil
	})
	old.subscribe(t, map[string]any{"topic": "inbound:*"})
	sender := newPeer(t, url, "sender", nil)
	for _, text := range []string{"one", "two"} {
		if got := ackIDs(sender.send(t, "inbound:x", text)); got != "old=true" {
			t.Errorf("ack %q", got)
		}
	}
	old.mu.Lock()
	defer old.mu.Unlock()
	var methods []string
	for _, d := range old.got {
		methods = append(methods, d.method)
	}
	if strings.Join(methods, ",") != "processMessage,sendMessage,sendMessage" {
		t.Errorf("methods %v: one processMessage tried, then sendMessage", methods)
	}
}

// TestBusBaseProtocolClientInFanOut: in a continueAll fan-out, a client
// that does not know processMessage is asked again with sendMessage, and
// gets sendMessage from then on, beside one that knows it.
func TestBusBaseProtocolClientInFanOut(t *testing.T) {
	_, url := busServer(t, fakemesh.New(), nil)
	old := newPeer(t, url, "old", func(d delivery) (any, error) {
		if d.method == "processMessage" {
			return nil, rpc.Errorf(rpc.CodeMethodNotFound, "method not found")
		}
		return map[string]any{"success": true}, nil
	})
	old.subscribe(t, map[string]any{"topic": "inbound:*", "policy": "continueAll"})
	cur := newPeer(t, url, "new", nil)
	cur.subscribe(t, map[string]any{"topic": "inbound:x", "policy": "continueAll"})
	sender := newPeer(t, url, "sender", nil)
	for _, text := range []string{"one", "two"} {
		if got := ackIDs(sender.send(t, "inbound:x", text)); got != "new=true old=true" {
			t.Errorf("acks %q", got)
		}
	}
	for p, want := range map[*peer]string{old: "processMessage,sendMessage,sendMessage", cur: "processMessage,processMessage"} {
		p.mu.Lock()
		var methods []string
		for _, d := range p.got {
			methods = append(methods, d.method)
		}
		p.mu.Unlock()
		if got := strings.Join(methods, ","); got != want {
			t.Errorf("%s got %s, want %s", p.id, got, want)
		}
	}
}

// TestBusSlowSubscriber: a subscriber that never answers holds only the
// messages sent to it.
func TestBusSlowSubscriber(t *testing.T) {
	_, url := busServer(t, fakemesh.New(), nil)
	block := make(chan struct{})
	defer close(block)
	stuck := newPeer(t, url, "stuck", func(delivery) (any, error) { <-block; return nil, errors.New("late") })
	stuck.subscribe(t, map[string]any{"topic": "slow:*"})
	fast := newPeer(t, url, "fast", nil)
	fast.subscribe(t, map[string]any{"topic": "fast:*"})
	p1, p2 := newPeer(t, url, "p1", nil), newPeer(t, url, "p2", nil)
	go func() {
		_ = p1.Call(context.Background(), "sendMessage", map[string]any{"topic": "slow:1", "payload": map[string]any{"type": "event"}}, nil)
	}()
	receive(t, stuck.notify, "the stuck delivery")
	start := time.Now()
	if got := ackIDs(p2.send(t, "fast:1", "x")); got != "fast=true" {
		t.Errorf("ack %q", got)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a message to another subscriber took %s behind a stuck one", d)
	}
}

// TestBusRestart: a message acknowledged as retrying survives the relay
// closing (its store file reopened by a new server) and reaches the
// subscriber when it comes back.
func TestBusRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bus.db")
	st1, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	srv1, url1 := busServer(t, fakemesh.New(), st1)
	later := newPeer(t, url1, "worker", func(delivery) (any, error) {
		return map[string]any{"processed": false, "should_retry": true, "retry_seconds": 3600, "message": "later"}, nil
	})
	later.subscribe(t, map[string]any{"topic": "job:*"})
	res := newPeer(t, url1, "sender", nil).send(t, "job:1", "keep me")
	if !res.Acks[0].Retrying {
		t.Fatalf("ack %+v", res.Acks)
	}
	if err := srv1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st1.Close(); err != nil {
		t.Fatal(err)
	}

	st2 := openStore(t, path)
	pending, err := st2.Pending(ctxT(t), 10)
	if err != nil || len(pending) != 1 || pending[0].Topic != "job:1" {
		t.Fatalf("outbox after restart %+v %v", pending, err)
	}
	// Make it due now rather than in an hour, then let the worker return.
	if err := st2.Retry(ctxT(t), pending[0].ID, "restart", time.Now()); err != nil {
		t.Fatal(err)
	}
	_, url2 := busServer(t, fakemesh.New(), st2)
	worker := newPeer(t, url2, "worker", nil)
	worker.subscribe(t, map[string]any{"topic": "job:*"})
	waitFor(t, "the message after the restart", func() bool { return strings.Join(worker.texts(), ",") == "keep me" })
}

// TestBusContinueAllConcurrent: subscriptions under continueAll cannot
// stop propagation, so they are delivered to at once: each of these two
// answers only once both have the message (sequential delivery would
// never finish).
func TestBusContinueAllConcurrent(t *testing.T) {
	_, url := busServer(t, fakemesh.New(), nil)
	var both sync.WaitGroup
	both.Add(2)
	for i, pattern := range []string{"audit:*", "audit:"} {
		p := newPeer(t, url, fmt.Sprintf("auditor-%d", i), func(delivery) (any, error) {
			both.Done()
			both.Wait()
			return map[string]any{"processed": true}, nil
		})
		p.subscribe(t, map[string]any{"topic": pattern, "policy": "continueAll"})
	}
	if got := ackIDs(newPeer(t, url, "sender", nil).send(t, "audit:1", "x")); got != "auditor-1=true auditor-0=true" {
		t.Errorf("acks %q, want both in subscription order, newest first", got)
	}
}
