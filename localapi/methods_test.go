package localapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// fakeNode is a localapi.Node that answers every method from memory and
// remembers what reached it.
type fakeNode struct {
	audits chan protocol.AuditQuery
	votes  chan protocol.ConsensusRequest

	mu     sync.Mutex
	status protocol.AgentStatus
	last   []string // the last context call: op, bead, value
	conns  []protocol.ConnInfo
	calls  []protocol.CallRecord
	// noDurables makes Durables and ForgetDurable refuse, as a node that
	// keeps no positions does.
	noDurables bool
	// taskCalls are the task methods that reached the node, each as
	// "method arg…" (tasks_test.go).
	taskCalls []string
}

var _ localapi.Node = (*fakeNode)(nil)

func newFakeNode() *fakeNode {
	return &fakeNode{
		audits: make(chan protocol.AuditQuery, 1),
		votes:  make(chan protocol.ConsensusRequest, 1),
		status: protocol.AgentStatus{Status: protocol.StatusAvailable},
	}
}

func (n *fakeNode) Audit(_ context.Context, q protocol.AuditQuery) ([]protocol.AuditEntry, error) {
	select {
	case n.audits <- q:
	default:
	}
	return []protocol.AuditEntry{{ID: "a1", At: time.Unix(1, 0).UTC(), AuditRecord: protocol.AuditRecord{Direction: protocol.CallSent, From: fakemesh.SelfID, To: fakemesh.PeerID, Capability: "echo", Outcome: "success"}}}, nil
}

func (n *fakeNode) Consensus(_ context.Context, req protocol.ConsensusRequest) (*protocol.ConsensusResult, error) {
	select {
	case n.votes <- req:
	default:
	}
	if req.Question == "refused" || len(req.Options) == 0 {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "vote refused")
	}
	return &protocol.ConsensusResult{DecisionID: "d1", Question: req.Question, Decision: req.Options[0], Threshold: req.Threshold, Tally: map[string]int{req.Options[0]: 1}}, nil
}

func (n *fakeNode) answer(op, bead string, v json.RawMessage) (*protocol.BeadContext, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.last = []string{op, bead, string(v)}
	if bead == "refused" {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "bead %s refused", bead)
	}
	if v == nil {
		v = json.RawMessage(`{}`)
	}
	return &protocol.BeadContext{BeadID: bead, CollaboratingAgents: []string{fakemesh.SelfID}, SharedContext: v, Patches: 1}, nil
}

func (n *fakeNode) ContextGet(_ context.Context, bead string) (*protocol.BeadContext, error) {
	return n.answer("get", bead, nil)
}

func (n *fakeNode) ContextSet(_ context.Context, bead string, doc json.RawMessage, _ []string) (*protocol.BeadContext, error) {
	return n.answer("set", bead, doc)
}

func (n *fakeNode) ContextPatch(_ context.Context, bead string, patch json.RawMessage, _ []string) (*protocol.BeadContext, error) {
	return n.answer("patch", bead, patch)
}

func (n *fakeNode) lastContext() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.last
}

func (n *fakeNode) SetStatus(s protocol.AgentStatus) error {
	if err := s.Check(); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.status = s
	return nil
}

func (n *fakeNode) Conns() []protocol.ConnInfo         { return n.conns }
func (n *fakeNode) RecentCalls() []protocol.CallRecord { return n.calls }

func (n *fakeNode) DeclaredStatus() protocol.AgentStatus {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.status
}

// serveMethods serves localapi.Register's methods over n on a fake mesh's
// local API (rpc options opts) and returns its URL.
func serveMethods(t testing.TB, n localapi.Node, opts ...rpc.Option) string {
	t.Helper()
	s := rpctest.Start(t, fakemesh.New(), rpctest.WithRPC(opts...))
	localapi.Register(s.Server, n)
	return s.URL
}

// plainClient dials a local API on which Register was not called.
func plainClient(t *testing.T) *rpc.Client {
	t.Helper()
	return rpctest.DialClient(t, rpctest.Start(t, fakemesh.New()).URL)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), rpctest.Timeout)
	t.Cleanup(cancel)
	return ctx
}

// rpcCode is the JSON-RPC code of err, or 0.
func rpcCode(err error) int {
	var re *rpc.Error
	if errors.As(err, &re) {
		return int(re.Code)
	}
	return 0
}

// TestMeshAudit: mesh.audit passes a checked query to the node's log;
// members of the wrong type, unknown members and out-of-range values are
// -32602; a server without Register's methods is -32601.
func TestMeshAudit(t *testing.T) {
	n := newFakeNode()
	cl := rpctest.DialClient(t, serveMethods(t, n))
	es, err := cl.Audit(ctxT(t), protocol.AuditQuery{Agent: fakemesh.PeerID, Since: time.Unix(100, 0).UTC()})
	if err != nil || len(es) != 1 || es[0].Capability != "echo" {
		t.Fatalf("audit: %+v %v", es, err)
	}
	if q := <-n.audits; q.Agent != fakemesh.PeerID || !q.Since.Equal(time.Unix(100, 0)) || q.Limit != 100 {
		t.Fatalf("query %+v: want the agent, since, and the default limit 100", q)
	}
	for _, params := range []string{
		`{"limit":"5"}`, `{"limit":0.5}`, `{"limit":1001}`, `{"limit":-1}`, `{"agent":5}`, `{"since":"yesterday"}`,
		`{"since":"2026-01-02T00:00:00Z","until":"2026-01-01T00:00:00Z"}`, `{"topic":"x"}`, `[]`,
	} {
		var out json.RawMessage
		err := cl.Call(ctxT(t), rpc.MethodMeshAudit, json.RawMessage(params), &out)
		if rpcCode(err) != rpc.CodeInvalidParams {
			t.Errorf("mesh.audit %s: %v, want -32602", params, err)
		}
	}
	if _, err := plainClient(t).Audit(ctxT(t), protocol.AuditQuery{}); rpcCode(err) != rpc.CodeMethodNotFound {
		t.Fatalf("mesh.audit without Register: %v, want -32601", err)
	}
}

// TestMeshSetStatus: mesh.setStatus declares the whole status and answers
// it; wrong types, unknown members and statuses an agent cannot declare
// are -32602 and change nothing.
func TestMeshSetStatus(t *testing.T) {
	n := newFakeNode()
	cl := rpctest.DialClient(t, serveMethods(t, n))
	want := protocol.AgentStatus{Status: protocol.StatusBusy, CurrentBead: "bd-1", MaxConcurrentBeads: 2}
	got, err := cl.SetStatus(ctxT(t), want)
	if err != nil || got != want || n.DeclaredStatus() != want {
		t.Fatalf("setStatus: %+v %v", got, err)
	}
	for _, params := range []string{
		`{}`, `{"status":"stale"}`, `{"status":1}`, `{"status":"busy","currentBead":5}`,
		`{"status":"busy","maxConcurrentBeads":"3"}`, `{"status":"busy","maxConcurrentBeads":-1}`,
		`{"status":"busy","current_bead":"x"}`, `[]`,
	} {
		var out json.RawMessage
		if err := cl.Call(ctxT(t), rpc.MethodMeshSetStatus, json.RawMessage(params), &out); rpcCode(err) != rpc.CodeInvalidParams {
			t.Errorf("mesh.setStatus %s: %v, want -32602", params, err)
		}
	}
	if n.DeclaredStatus() != want {
		t.Fatalf("a refused status changed the declared one: %+v", n.DeclaredStatus())
	}
	if _, err := plainClient(t).SetStatus(ctxT(t), want); rpcCode(err) != rpc.CodeMethodNotFound {
		t.Fatalf("mesh.setStatus without Register: %v, want -32601", err)
	}
}

// TestMeshConsensus: mesh.consensus hands the vote to the node with the
// deadline in milliseconds and answers its result; params of the wrong
// type, unknown members and a deadline out of range are -32602 naming
// the member and never reach the node; the node's refusal comes back as
// a protocol error.
func TestMeshConsensus(t *testing.T) {
	n := newFakeNode()
	cl := rpctest.DialClient(t, serveMethods(t, n))
	req := protocol.ConsensusRequest{Agents: []string{fakemesh.PeerID}, Question: "ship?", Options: []string{"yes", "no"}, Threshold: 0.5, Deadline: 1500 * time.Millisecond}
	res, err := cl.Consensus(ctxT(t), req)
	if err != nil || res.Decision != "yes" || res.DecisionID != "d1" || res.Question != "ship?" || res.Tally["yes"] != 1 {
		t.Fatalf("consensus: %+v %v", res, err)
	}
	if got := <-n.votes; got.Deadline != req.Deadline || got.Question != "ship?" || got.Threshold != 0.5 {
		t.Fatalf("the node got %+v", got)
	}
	if _, err := cl.Consensus(ctxT(t), protocol.ConsensusRequest{Agents: []string{"a"}, Question: "refused", Options: []string{"y"}, Threshold: 1, Deadline: time.Second}); protocol.AsError(err) == nil || protocol.AsError(err).Code != protocol.CodeInvalidMessage {
		t.Fatalf("refusal: %v, want INVALID_MESSAGE", err)
	}
	<-n.votes
	for _, tc := range []struct{ params, want string }{
		{`{"agents":"a","question":"q","options":["y"],"threshold":0.5,"deadlineMs":1000}`, `"agents" must be an array`},
		{`{"agents":["a"],"question":"q","options":["y"],"threshold":0.5,"deadlineMs":"1000"}`, `"deadlineMs" must be a whole number`},
		{`{"Agents":["a"],"question":"q","options":["y"],"threshold":0.5,"deadlineMs":1000}`, `unknown field "Agents"`},
		{`{"agents":["a"],"question":"q","options":["y"],"threshold":0.5,"deadlineMs":0}`, `"deadlineMs" must be from 1 to 3600000`},
		{`{"agents":["a"],"question":"q","options":["y"],"threshold":0.5,"deadlineMs":3600001}`, `"deadlineMs" must be from 1 to 3600000`},
		{`["a"]`, `mesh.consensus takes {"agents"`},
	} {
		var re *rpc.Error
		err := cl.Call(ctxT(t), rpc.MethodMeshConsensus, json.RawMessage(tc.params), nil)
		if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, tc.want) {
			t.Errorf("mesh.consensus %s: %v, want -32602 with %q", tc.params, err, tc.want)
		}
	}
	select {
	case got := <-n.votes:
		t.Fatalf("a refused call reached the node: %+v", got)
	default:
	}
	if _, err := plainClient(t).Consensus(ctxT(t), req); rpcCode(err) != rpc.CodeMethodNotFound {
		t.Fatalf("mesh.consensus without Register: %v, want -32601", err)
	}
}

// TestMeshContextParamsAreStrict: every mesh.context* call with a member
// of the wrong JSON type, an unknown or repeated member, or a missing one
// is -32602 naming it, and never reaches the node.
func TestMeshContextParamsAreStrict(t *testing.T) {
	n := newFakeNode()
	c := rpctest.DialClient(t, serveMethods(t, n))
	for _, tc := range []struct{ method, params, want string }{
		{rpc.MethodMeshContextGet, `{"beadId":5}`, `"beadId" must be a string`},
		{rpc.MethodMeshContextGet, `{"bead":"b1"}`, `unknown field "bead"`},
		{rpc.MethodMeshContextGet, `{}`, `"beadId" is required`},
		{rpc.MethodMeshContextGet, `["b1"]`, `takes {"beadId"}`},
		{rpc.MethodMeshContextGet, `{"beadId":"b1","beadId":"b2"}`, `duplicate member "beadId"`},
		{rpc.MethodMeshContextSet, `{"beadId":"b1","context":[1]}`, `"context" must be an object`},
		{rpc.MethodMeshContextSet, `{"beadId":"b1","context":"x"}`, `"context" must be an object`},
		{rpc.MethodMeshContextSet, `{"beadId":"b1"}`, `"context" must be an object`},
		{rpc.MethodMeshContextSet, `{"beadId":"b1","context":null}`, `"context" must be an object`},
		{rpc.MethodMeshContextSet, `{"beadId":"b1","patch":{}}`, `unknown field "patch"`},
		{rpc.MethodMeshContextPatch, `{"beadId":"b1","patch":7}`, `"patch" must be an object`},
		{rpc.MethodMeshContextPatch, `{"beadId":["b1"],"patch":{}}`, `"beadId" must be a string`},
		{rpc.MethodMeshContextPatch, `{"BeadId":"b1","patch":{}}`, `unknown field "BeadId"`},
		{rpc.MethodMeshContextPatch, `{"beadId":"b1","patch":{"a":1,"a":2}}`, `duplicate member`},
		{rpc.MethodMeshContextPatch, `{"beadId":"b1","patch":{},"members":"a"}`, `"members"`},
		{rpc.MethodMeshContextSet, `{"beadId":"b1","context":{},"members":[1]}`, `"members`},
	} {
		var re *rpc.Error
		err := c.Call(ctxT(t), tc.method, json.RawMessage(tc.params), nil)
		if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, tc.want) {
			t.Errorf("%s %s: %v, want -32602 with %q", tc.method, tc.params, err, tc.want)
		}
	}
	if last := n.lastContext(); last != nil {
		t.Fatalf("a refused call reached the node: %v", last)
	}
}

// TestMeshContextClient: the Go client's calls reach the node with the
// bead and value as given, answers decode, and the node's refusals come
// back as protocol errors; a server without Register's methods is -32601.
func TestMeshContextClient(t *testing.T) {
	n := newFakeNode()
	c := rpctest.DialClient(t, serveMethods(t, n))
	ctx := ctxT(t)
	got, err := c.ContextPatch(ctx, "bead-1", json.RawMessage(`{"a":{"b":null}}`), nil)
	if err != nil || got.BeadID != "bead-1" || string(got.SharedContext) != `{"a":{"b":null}}` {
		t.Fatalf("%v %+v", err, got)
	}
	if last := n.lastContext(); last[0] != "patch" || last[2] != `{"a":{"b":null}}` {
		t.Fatalf("node got %v", last)
	}
	if _, err := c.ContextSet(ctx, "bead-1", json.RawMessage(`{"x":1}`), nil); err != nil || n.lastContext()[0] != "set" {
		t.Fatalf("%v %v", err, n.lastContext())
	}
	if got, err := c.ContextGet(ctx, "bead-1"); err != nil || n.lastContext()[0] != "get" || got.Patches != 1 {
		t.Fatalf("%v %v", err, n.lastContext())
	}
	_, err = c.ContextGet(ctx, "refused")
	if pe := protocol.AsError(err); pe == nil || pe.Code != protocol.CodeInvalidMessage {
		t.Fatalf("refusal: %v, want INVALID_MESSAGE", err)
	}
	if _, err := plainClient(t).ContextGet(ctx, "bead-1"); rpcCode(err) != rpc.CodeMethodNotFound {
		t.Fatalf("mesh.contextGet without Register: %v, want -32601", err)
	}
}

// methodsUnderFuzz are the methods FuzzMeshMethods calls; the fuzzer
// picks one.
var methodsUnderFuzz = []string{
	rpc.MethodMeshAudit, rpc.MethodMeshConsensus, rpc.MethodMeshSetStatus,
	rpc.MethodMeshContextGet, rpc.MethodMeshContextSet, rpc.MethodMeshContextPatch,
	rpc.MethodMeshDiscover, rpc.MethodMeshDurables, rpc.MethodMeshForgetDurable,
	rpc.MethodMeshTaskStatus, rpc.MethodMeshTaskCancel, rpc.MethodMeshSubmit, rpc.MethodMeshTaskWait, rpc.MethodMeshTasks,
}

// FuzzMeshMethods calls each of Register's methods with fuzzed params:
// never -32603, and a -32602 says "invalid params: …" (a wrong JSON type
// is a clear error, not a panic or a silent default).
func FuzzMeshMethods(f *testing.F) {
	seeds := map[string][]string{
		rpc.MethodMeshAudit:         {`{"agent":"a","limit":5}`, `{"limit":"5"}`, `{"since":"2026-01-02T00:00:00Z"}`},
		rpc.MethodMeshConsensus:     {`{"agents":["a"],"question":"q","options":["y","n"],"threshold":0.5,"deadlineMs":1000}`, `{"agents":"a","deadlineMs":"1"}`},
		rpc.MethodMeshSetStatus:     {`{"status":"busy","currentBead":"b","maxConcurrentBeads":2}`, `{"status":1}`},
		rpc.MethodMeshContextGet:    {`{"beadId":"bead-1"}`, `{"beadId":5}`},
		rpc.MethodMeshContextSet:    {`{"beadId":"bead-1","context":{"a":1}}`, `{"beadId":"b","context":[1]}`},
		rpc.MethodMeshContextPatch:  {`{"beadId":"bead-1","patch":{"a":null}}`, `{"beadId":"b","patch":"x"}`},
		rpc.MethodMeshTaskStatus:    {`{"taskId":"t1"}`, `{"taskId":1}`, `{"TASKID":"t1"}`},
		rpc.MethodMeshTaskCancel:    {`{"taskId":"t1","agentId":5}`},
		rpc.MethodMeshSubmit:        {`{"agentId":"a","capability":"echo","params":{},"timeoutMs":100,"taskId":"r1","deadline":"1h"}`, `{"agentId":"a","capability":"echo","deadline":"forever"}`},
		rpc.MethodMeshTaskWait:      {`{"taskId":"t1","timeoutMs":10}`, `{"taskId":"failed"}`, `{"taskId":"t1","timeoutMs":-1}`},
		rpc.MethodMeshTasks:         {`{"state":"COMPLETED"}`, `{"state":1}`},
		rpc.MethodMeshForgetDurable: {`{"durable":"reader"}`, `{"durable":""}`, `{"durable":7}`},
		rpc.MethodMeshDiscover:      {`{"capability":"echo"}`, `{"keyword":["a"]}`, `{"capability":"x","timeoutMs":1.5}`, `{"capability":"translate","filter":{"required_capabilities":["summarize"]}}`},
	}
	for i, m := range methodsUnderFuzz {
		f.Add(uint8(i), []byte(`{}`))
		f.Add(uint8(i), []byte(`[]`))
		f.Add(uint8(i), []byte(`{"unknown":true}`))
		for _, s := range seeds[m] {
			f.Add(uint8(i), []byte(s))
		}
	}
	// The server logs nowhere: testing.F's log is not for the fuzz
	// function's goroutines.
	c := rpctest.DialClient(f, serveMethods(f, newFakeNode(), rpc.WithLogger(slog.New(slog.DiscardHandler))))
	f.Fuzz(func(t *testing.T, which uint8, params []byte) {
		if !json.Valid(params) || !utf8.Valid(params) {
			return // the decoder's own cases: rpc's FuzzDispatch
		}
		method := methodsUnderFuzz[int(which)%len(methodsUnderFuzz)]
		var re *rpc.Error
		err := c.Call(ctxT(t), method, json.RawMessage(params), nil)
		switch {
		case err == nil || protocol.AsError(err) != nil:
		case !errors.As(err, &re):
			t.Fatalf("%s %s: %v", method, params, err)
		case re.Code == rpc.CodeInternalError:
			t.Fatalf("%s %s: internal error %v", method, params, err)
		case re.Code == rpc.CodeInvalidParams && !strings.HasPrefix(re.Message, "invalid params: "):
			t.Fatalf("%s %s: -32602 without its prefix: %q", method, params, re.Message)
		}
	})
}

// TestOperatorMethods: RegisterOperator serves the node's connections
// and recent calls as it lists them, [] when it lists none, and refuses
// params; Register alone does not serve them.
func TestOperatorMethods(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	n := newFakeNode()
	n.conns = []protocol.ConnInfo{
		{AgentID: "a", RemoteAddr: "/ip4/10.0.0.1/tcp/4001", Direction: "outbound", Opened: at},
		{AgentID: "b", RemoteAddr: "/ip4/10.0.0.2/tcp/4001/p2p/r/p2p-circuit", Direction: "inbound", Relayed: true},
	}
	n.calls = []protocol.CallRecord{{At: at, Direction: protocol.CallSent, Capability: "echo", AgentID: "a", Outcome: "success", DurationMS: 1.5}}
	serveOperator := func(n localapi.Node) *rpc.Client {
		s := rpctest.Start(t, fakemesh.New())
		localapi.Register(s.Server, n)
		localapi.RegisterOperator(s.Server, n)
		return rpctest.DialClient(t, s.URL)
	}
	ctx := ctxT(t)

	t.Run("served by RegisterOperator", func(t *testing.T) {
		c := serveOperator(n)
		var conns []protocol.ConnInfo
		if err := c.Call(ctx, rpc.MethodMeshConnections, nil, &conns); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(conns, n.conns) {
			t.Fatalf("mesh.connections = %+v, want %+v", conns, n.conns)
		}
		var calls []protocol.CallRecord
		if err := c.Call(ctx, rpc.MethodMeshRecentCalls, nil, &calls); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(calls, n.calls) {
			t.Fatalf("mesh.recentCalls = %+v, want %+v", calls, n.calls)
		}
		if err := c.Call(ctx, rpc.MethodMeshRecentCalls, map[string]any{"x": 1}, nil); rpcCode(err) != rpc.CodeInvalidParams {
			t.Fatalf("with params: %v, want invalid params", err)
		}
	})
	t.Run("empty is an empty list", func(t *testing.T) {
		c := serveOperator(newFakeNode())
		for _, m := range []string{rpc.MethodMeshConnections, rpc.MethodMeshRecentCalls} {
			var res any
			if err := c.Call(ctx, m, nil, &res); err != nil {
				t.Fatal(err)
			}
			if l, ok := res.([]any); !ok || len(l) != 0 {
				t.Fatalf("%s with none = %#v, want []", m, res)
			}
		}
	})
	t.Run("not served by Register alone", func(t *testing.T) {
		c := rpctest.DialClient(t, serveMethods(t, n))
		for _, m := range []string{rpc.MethodMeshConnections, rpc.MethodMeshRecentCalls} {
			if err := c.Call(ctx, m, nil, nil); rpcCode(err) != rpc.CodeMethodNotFound {
				t.Errorf("%s without RegisterOperator: %v, want method not found", m, err)
			}
		}
	})
}
