package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// fakeProvider stands for the node: it records what is offered and
// hands tasks and messages to the server as the node would after its
// checks.
type fakeProvider struct {
	mu     sync.Mutex
	caps   []protocol.Capability
	h      rpc.TaskHandler
	offers int
	msg    rpc.MessageHandler
	sent   []protocol.AgentMessage
	refuse string // a name Offer refuses, as the node does one it offers itself
}

func (f *fakeProvider) Offer(caps []protocol.Capability, h rpc.TaskHandler) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range caps {
		if c.Name == f.refuse {
			return fmt.Errorf("node: capability offered by another source: %q", c.Name)
		}
	}
	f.caps, f.h = caps, h
	f.offers++
	return nil
}

func (f *fakeProvider) OnMessage(h rpc.MessageHandler) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msg = h
}

func (f *fakeProvider) SendMessage(_ context.Context, to string, m protocol.AgentMessage) (json.RawMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if to == peerID && m.Subject == "fail" {
		return nil, protocol.Errorf(protocol.CodeUnknownAgent, "agent %s is not reachable", to)
	}
	if to == peerID && m.Subject == "away" {
		return nil, fmt.Errorf("%w: agent %s is away", rpc.ErrQueued, to)
	}
	f.sent = append(f.sent, m)
	if m.RequiresResponse {
		return json.RawMessage(`{"ack":"` + m.Subject + `"}`), nil
	}
	return json.RawMessage("null"), nil
}

// offered returns the names offered now.
func (f *fakeProvider) offered() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	names := make([]string, len(f.caps))
	for i, c := range f.caps {
		names[i] = c.Name
	}
	return strings.Join(names, ",")
}

// run hands a task for capability to the server, as the node does.
func (f *fakeProvider) run(ctx context.Context, capability string, params string, rec *taskRecord) (json.RawMessage, error) {
	f.mu.Lock()
	h := f.h
	f.mu.Unlock()
	if h == nil {
		return nil, errors.New("nothing offered")
	}
	t := &rpc.Task{Requester: peerID, Capability: capability, Params: json.RawMessage(params), CorrelationID: "corr-" + capability,
		Deadline: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	if rec != nil {
		t.Progress, t.SetState = rec.progress, rec.setState
	} else {
		t.Progress = func(json.RawMessage) error { return nil }
		t.SetState = func(protocol.TaskState) {}
	}
	return h(ctx, t)
}

// taskRecord records what reached the node for one task, in order.
type taskRecord struct {
	mu     sync.Mutex
	events []string
}

func (r *taskRecord) progress(res json.RawMessage) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "progress "+string(res))
	return nil
}

func (r *taskRecord) setState(s protocol.TaskState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, "state "+string(s))
}

// agent is a Go client serving through the server: handle answers each
// mesh.handle, and every request and notification it gets is recorded.
type agent struct {
	c       *rpc.Client
	handles chan rpc.HandleParams
	cancels chan string
}

func newAgent(t *testing.T, url, clientID string, handle func(ctx context.Context, c *rpc.Client, p rpc.HandleParams) (any, error)) *agent {
	a := &agent{handles: make(chan rpc.HandleParams, 64), cancels: make(chan string, 64)}
	ready := make(chan struct{})
	opts := []rpc.ClientOption{
		rpc.WithRequestHandler(func(ctx context.Context, method string, params json.RawMessage) (any, error) {
			<-ready
			switch method {
			case rpc.MethodMeshHandle:
				var p rpc.HandleParams
				if err := json.Unmarshal(params, &p); err != nil {
					return nil, err
				}
				a.handles <- p
				return handle(ctx, a.c, p)
			case rpc.MethodMeshAgentMessage:
				var p rpc.AgentMessageParams
				if err := json.Unmarshal(params, &p); err != nil {
					return nil, err
				}
				return map[string]string{"from": p.From, "subject": p.Message.Subject}, nil
			}
			return nil, rpc.Errorf(rpc.CodeMethodNotFound, "no %s", method)
		}),
		rpc.WithNotificationHandler(func(method string, params json.RawMessage) {
			if method == rpc.MethodMeshCancel {
				var p rpc.CancelParams
				_ = json.Unmarshal(params, &p)
				a.cancels <- p.TaskID
			}
		}),
	}
	if clientID != "" {
		opts = append(opts, rpc.WithClientID(clientID))
	}
	a.c = dialClient(t, url, opts...)
	close(ready)
	return a
}

func (a *agent) serve(t *testing.T, caps ...string) rpc.ServeResult {
	t.Helper()
	var objs []json.RawMessage
	for _, c := range caps {
		objs = append(objs, json.RawMessage(c))
	}
	var res rpc.ServeResult
	if err := a.c.Call(ctxT(t), rpc.MethodMeshServe, rpc.ServeParams{Capabilities: objs}, &res); err != nil {
		t.Fatalf("mesh.serve: %v", err)
	}
	return res
}

const summarize = `{"name":"summarize","description":"tl;dr","input_schema":{"type":"object"},"idempotent":false}`

func newServeServer(t *testing.T, opts ...rpc.Option) (*testServer, *fakeProvider) {
	p := &fakeProvider{}
	return newTestServer(t, append([]rpc.Option{rpc.WithProvider(p)}, opts...)...), p
}

// TestServeExchange: a request reaches the serving client as mesh.handle;
// its progress and state reach the node, in order, before its answer.
func TestServeExchange(t *testing.T) {
	ts, p := newServeServer(t)
	a := newAgent(t, ts.url, "py-agent", func(ctx context.Context, c *rpc.Client, hp rpc.HandleParams) (any, error) {
		for i := 1; i <= 3; i++ {
			if err := c.Notify(ctx, rpc.MethodMeshProgress, rpc.TaskProgressParams{TaskID: hp.TaskID, Result: json.RawMessage(fmt.Sprintf(`{"step":%d}`, i))}); err != nil {
				return nil, err
			}
		}
		if err := c.Notify(ctx, rpc.MethodMeshSetState, rpc.SetStateParams{TaskID: hp.TaskID, State: protocol.TaskEscalated}); err != nil {
			return nil, err
		}
		return map[string]any{"summary": "short", "params": hp.Params}, nil
	})
	if res := a.serve(t, summarize); !slices.Equal(res.Serving, []string{"summarize"}) {
		t.Fatalf("serving %v", res.Serving)
	}
	if got := p.offered(); got != "summarize" {
		t.Fatalf("offered %q", got)
	}
	var rec taskRecord
	res, err := p.run(ctxT(t), "summarize", `{"text":"long"}`, &rec)
	if err != nil {
		t.Fatal(err)
	}
	if string(res) != `{"params":{"text":"long"},"summary":"short"}` {
		t.Errorf("result %s", res)
	}
	want := []string{`progress {"step":1}`, `progress {"step":2}`, `progress {"step":3}`, "state ESCALATED"}
	if !slices.Equal(rec.events, want) {
		t.Errorf("the node saw %q, want %q", rec.events, want)
	}
	hp := receive(t, a.handles, "mesh.handle")
	if hp.Requester != peerID || hp.Capability != "summarize" || hp.CorrelationID != "corr-summarize" ||
		hp.Deadline != "2030-01-02T03:04:05.000Z" || hp.TaskID == "" {
		t.Errorf("mesh.handle params %+v", hp)
	}
	// No params reach the client as {}.
	if _, err := p.run(ctxT(t), "summarize", "", nil); err != nil {
		t.Fatal(err)
	}
	if hp := receive(t, a.handles, "mesh.handle"); string(hp.Params) != "{}" {
		t.Errorf("absent params reached the client as %s", hp.Params)
	}
}

// TestServeErrors: a client's error with an AgentProtocol code reaches
// the node as that *protocol.Error; any other as INTERNAL_ERROR.
func TestServeErrors(t *testing.T) {
	ts, p := newServeServer(t)
	a := newAgent(t, ts.url, "", func(_ context.Context, _ *rpc.Client, hp rpc.HandleParams) (any, error) {
		if string(hp.Params) == `{"plain":true}` {
			return nil, rpc.Errorf(-32000, "handler crashed")
		}
		return nil, protocol.Errorf(protocol.CodeRateLimited, "too long").WithDetails(map[string]int{"max": 100000})
	})
	a.serve(t, summarize)
	_, err := p.run(ctxT(t), "summarize", `{}`, nil)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeRateLimited || pe.Message != "too long" || string(pe.Details) != `{"max":100000}` {
		t.Errorf("error %#v, want RATE_LIMITED with its details", err)
	}
	_, err = p.run(ctxT(t), "summarize", `{"plain":true}`, nil)
	if protocol.CodeOf(err) != protocol.CodeInternalError || !strings.Contains(err.Error(), "handler crashed") {
		t.Errorf("error %v, want INTERNAL_ERROR naming the client's message", err)
	}
	if _, err := p.run(ctxT(t), "nothing", `{}`, nil); protocol.CodeOf(err) != protocol.CodeCapabilityNotSupported {
		t.Errorf("a capability nobody serves: %v", err)
	}
}

// TestServeCancel: the requester's cancellation reaches the client as
// mesh.cancel for the task.
func TestServeCancel(t *testing.T) {
	ts, p := newServeServer(t)
	a := newAgent(t, ts.url, "", func(ctx context.Context, _ *rpc.Client, _ rpc.HandleParams) (any, error) {
		<-ctx.Done() // the client's connection ends it
		return nil, ctx.Err()
	})
	a.serve(t, summarize)
	ctx, cancel := context.WithCancel(ctxT(t))
	done := make(chan error, 1)
	go func() { _, err := p.run(ctx, "summarize", `{}`, nil); done <- err }()
	hp := receive(t, a.handles, "mesh.handle")
	cancel()
	if err := receive(t, done, "the cancelled task's answer"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled task answered %v", err)
	}
	if id := receive(t, a.cancels, "mesh.cancel"); id != hp.TaskID {
		t.Errorf("mesh.cancel for %q, want %q", id, hp.TaskID)
	}
}

// TestServeLoadSharing: two connections serving one capability share its
// requests, the one with fewer in flight first.
func TestServeLoadSharing(t *testing.T) {
	ts, p := newServeServer(t)
	release := make(chan struct{})
	var mu sync.Mutex
	served := map[string]int{}
	handler := func(name string) func(context.Context, *rpc.Client, rpc.HandleParams) (any, error) {
		return func(ctx context.Context, _ *rpc.Client, _ rpc.HandleParams) (any, error) {
			mu.Lock()
			served[name]++
			mu.Unlock()
			select {
			case <-release:
			case <-ctx.Done():
			}
			return name, nil
		}
	}
	a := newAgent(t, ts.url, "a", handler("a"))
	b := newAgent(t, ts.url, "b", handler("b"))
	a.serve(t, summarize)
	b.serve(t, summarize)
	if p.offers != 1 {
		t.Errorf("the same capability from a second connection offered again (%d offers)", p.offers)
	}
	// Two requests in flight at once: one on each connection.
	results := make(chan string, 4)
	for range 2 {
		go func() {
			res, err := p.run(ctxT(t), "summarize", `{}`, nil)
			if err != nil {
				results <- err.Error()
				return
			}
			results <- string(res)
		}()
	}
	receive(t, a.handles, "a's mesh.handle")
	receive(t, b.handles, "b's mesh.handle")
	close(release)
	got := []string{receive(t, results, "answer"), receive(t, results, "answer")}
	slices.Sort(got)
	if !slices.Equal(got, []string{`"a"`, `"b"`}) {
		t.Errorf("answers %q, want one from each connection", got)
	}
	// Idle again: the least recently picked goes first, so they alternate.
	for range 4 {
		if _, err := p.run(ctxT(t), "summarize", `{}`, nil); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if served["a"] != 3 || served["b"] != 3 {
		t.Errorf("served %v, want 3 each", served)
	}
}

// TestServeGrace: a capability whose connection went away stays offered
// for the grace; a request meanwhile waits for the client to serve it
// again, and one that does not come back has it withdrawn.
func TestServeGrace(t *testing.T) {
	ts, p := newServeServer(t, rpc.WithServeGrace(time.Hour))
	echo := func(_ context.Context, _ *rpc.Client, hp rpc.HandleParams) (any, error) { return hp.Params, nil }
	a := newAgent(t, ts.url, "py-agent", echo)
	a.serve(t, summarize)
	_ = a.c.Close()
	waitFor(t, "the server to see the connection gone", func() bool { return ts.srv.Clients() == 0 })
	if got := p.offered(); got != "summarize" {
		t.Fatalf("offered %q during the grace, want summarize still", got)
	}
	done := make(chan string, 1)
	go func() {
		res, err := p.run(ctxT(t), "summarize", `{"n":1}`, nil)
		done <- fmt.Sprintf("%s %v", res, err)
	}()
	// The same client reconnects and serves it again: the waiting request
	// is answered by it.
	again := newAgent(t, ts.url, "py-agent", echo)
	again.serve(t, summarize)
	if got := receive(t, done, "the request that waited"); got != `{"n":1} <nil>` {
		t.Errorf("the waiting request got %s", got)
	}
	if p.offers != 1 {
		t.Errorf("re-serving within the grace offered again (%d offers)", p.offers)
	}
	if got := p.offered(); got != "summarize" {
		t.Errorf("offered %q", got)
	}
}

// TestServeGraceExpires: with nobody serving it again, the capability is
// withdrawn after the grace, and a request that waited is refused.
func TestServeGraceExpires(t *testing.T) {
	ts, p := newServeServer(t, rpc.WithServeGrace(200*time.Millisecond))
	a := newAgent(t, ts.url, "", func(context.Context, *rpc.Client, rpc.HandleParams) (any, error) { return 1, nil })
	a.serve(t, summarize)
	_ = a.c.Close()
	waitFor(t, "the server to see the connection gone", func() bool { return ts.srv.Clients() == 0 })
	_, err := p.run(ctxT(t), "summarize", `{}`, nil)
	if protocol.CodeOf(err) != protocol.CodeCapabilityNotSupported {
		t.Errorf("a request in the grace with nobody coming back: %v", err)
	}
	waitFor(t, "the capability withdrawn", func() bool { return p.offered() == "" })
}

// TestUnserve: unserve withdraws at once what no other connection serves.
func TestUnserve(t *testing.T) {
	ts, p := newServeServer(t)
	h := func(context.Context, *rpc.Client, rpc.HandleParams) (any, error) { return 1, nil }
	a := newAgent(t, ts.url, "", h)
	b := newAgent(t, ts.url, "", h)
	a.serve(t, summarize, `{"name":"translate"}`)
	b.serve(t, summarize)
	var res rpc.ServeResult
	if err := a.c.Call(ctxT(t), rpc.MethodMeshUnserve, rpc.UnserveParams{Capabilities: []string{"summarize", "translate"}}, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Serving) != 0 {
		t.Errorf("a still serves %v", res.Serving)
	}
	if got := p.offered(); got != "summarize" {
		t.Errorf("offered %q, want summarize (b still serves it)", got)
	}
}

// TestServeBadParams: mesh.serve and mesh.sendMessage decode strictly;
// every refusal is -32602 with a message that says what is wrong.
func TestServeBadParams(t *testing.T) {
	ts, p := newServeServer(t)
	p.refuse = "echo"
	a := newAgent(t, ts.url, "", func(context.Context, *rpc.Client, rpc.HandleParams) (any, error) { return 1, nil })
	b := newAgent(t, ts.url, "", func(context.Context, *rpc.Client, rpc.HandleParams) (any, error) { return 1, nil })
	a.serve(t, summarize)
	for _, tc := range []struct {
		conn          *agent
		method, param string
		want          string
	}{
		{a, rpc.MethodMeshServe, `{}`, "at least one"},
		{a, rpc.MethodMeshServe, `{"capabilities":{}}`, `"capabilities" must be`},
		{a, rpc.MethodMeshServe, `{"capabilities":[{"name":"x","handler":"echo"}]}`, "no \"handler\""},
		{a, rpc.MethodMeshServe, `{"capabilities":[{"name":"x","Description":"d"}]}`, `unknown field "Description"`},
		{a, rpc.MethodMeshServe, `{"capabilities":[{"name":7}]}`, `"name" must be a string`},
		{a, rpc.MethodMeshServe, `{"capabilities":[{"name":"x","idempotent":"yes"}]}`, `"idempotent" must be a boolean`},
		{a, rpc.MethodMeshServe, `{"capabilities":[{"name":"x","input_schema":{"type":"nope"}}]}`, "input_schema"},
		{a, rpc.MethodMeshServe, `{"capabilities":[{"name":"x"},{"name":"x"}]}`, "listed twice"},
		{a, rpc.MethodMeshServe, `{"capabilities":[{"name":"echo"}]}`, "another source"},
		{b, rpc.MethodMeshServe, `{"capabilities":[{"name":"summarize","description":"other"}]}`, "different definition"},
		{a, rpc.MethodMeshUnserve, `{"capabilities":"summarize"}`, `"capabilities" must be`},
		{a, rpc.MethodMeshOnMessage, `{"x":1}`, `unknown field "x"`},
		{a, rpc.MethodMeshSendMessage, `{"agentId":"nobody","message":{"body":"b"}}`, `"agentId"`},
		{a, rpc.MethodMeshSendMessage, `{"agentId":"` + peerID + `","message":"hi"}`, `"message" must be an object`},
		{a, rpc.MethodMeshSendMessage, `{"agentId":"` + peerID + `","message":{"body":1}}`, `"body" must be a string`},
		{a, rpc.MethodMeshSendMessage, `{"agentId":"` + peerID + `","message":{"subject":"s","Body":"b"}}`, `unknown field "Body"`},
		{a, rpc.MethodMeshSendMessage, `{"agentId":"` + peerID + `","message":{}}`, "subject or a body"},
	} {
		err := tc.conn.c.Call(ctxT(t), tc.method, json.RawMessage(tc.param), nil)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, tc.want) {
			t.Errorf("%s %s: %v, want -32602 containing %q", tc.method, tc.param, err, tc.want)
		}
	}
	// Nothing refused changed what is offered or who serves it.
	if got := p.offered(); got != "summarize" {
		t.Errorf("offered %q after the refusals", got)
	}
	if _, err := p.run(ctxT(t), "summarize", `{}`, nil); err != nil {
		t.Errorf("summarize after the refusals: %v", err)
	}
	select {
	case <-b.handles:
		t.Error("b, refused, was handed a task")
	default:
	}
}

// TestDirectMessages: mesh.onMessage takes the node's direct messages as
// mesh.agentMessage requests; mesh.sendMessage sends through the node.
func TestDirectMessages(t *testing.T) {
	ts, p := newServeServer(t)
	a := newAgent(t, ts.url, "", nil)
	if err := a.c.Call(ctxT(t), rpc.MethodMeshOnMessage, struct{}{}, nil); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	h := p.msg
	p.mu.Unlock()
	if h == nil {
		t.Fatal("mesh.onMessage set no message handler")
	}
	res, err := h(ctxT(t), peerID, protocol.AgentMessage{MessageID: "m1", Subject: "review", Body: "please", RequiresResponse: true})
	if err != nil || string(res) != `{"from":"`+peerID+`","subject":"review"}` {
		t.Errorf("message answered %s, %v", res, err)
	}

	var out rpc.SendMessageResult
	err = a.c.Call(ctxT(t), rpc.MethodMeshSendMessage, json.RawMessage(`{"agentId":"`+peerB64+`","message":{"subject":"hello","body":"hi","requires_response":true}}`), &out)
	if err != nil {
		t.Fatal(err)
	}
	if out.MessageID == "" || out.Queued || string(out.Response) != `{"ack":"hello"}` {
		t.Errorf("sendMessage result %+v", out)
	}
	if len(p.sent) != 1 || p.sent[0].MessageID != out.MessageID || p.sent[0].Priority != protocol.PriorityNormal {
		t.Errorf("sent %+v", p.sent)
	}
	var raw json.RawMessage
	if err := a.c.Call(ctxT(t), rpc.MethodMeshSendMessage, json.RawMessage(`{"agentId":"`+peerID+`","message":{"message_id":"m9","body":"no answer"}}`), &raw); err != nil {
		t.Fatal(err)
	}
	if string(raw) != `{"messageId":"m9","queued":false}` {
		t.Errorf("result without a response: %s", raw)
	}
	err = a.c.Call(ctxT(t), rpc.MethodMeshSendMessage, json.RawMessage(`{"agentId":"`+peerID+`","message":{"subject":"fail"}}`), nil)
	if pe := rpc.ProtocolError(err); pe == nil || pe.Code != protocol.CodeUnknownAgent {
		t.Errorf("undeliverable message: %v, want UNKNOWN_AGENT", err)
	}
	raw = nil
	if err := a.c.Call(ctxT(t), rpc.MethodMeshSendMessage, json.RawMessage(`{"agentId":"`+peerID+`","message":{"message_id":"m10","subject":"away"}}`), &raw); err != nil {
		t.Fatal(err)
	}
	if string(raw) != `{"messageId":"m10","queued":true}` {
		t.Errorf("queued message: %s", raw)
	}

	// The only taker gone for good: the node's default handler is back.
	_ = a.c.Close()
	waitFor(t, "the server to see the connection gone", func() bool { return ts.srv.Clients() == 0 })
}

// TestServeNeedsProvider: without a Provider the methods are not found,
// as on a node that does not serve.
func TestServeNeedsProvider(t *testing.T) {
	ts := newTestServer(t)
	c := dialClient(t, ts.url)
	err := c.Call(ctxT(t), rpc.MethodMeshServe, json.RawMessage(`{"capabilities":[{"name":"x"}]}`), nil)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeMethodNotFound {
		t.Errorf("mesh.serve without a Provider: %v", err)
	}
}
