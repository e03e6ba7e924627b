package localapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// fakeLibrarian keeps submitted tasks in memory, as a node's records
// would, and answers librarian:context calls with ctxResult.
type fakeLibrarian struct {
	fakeDir
	mu        sync.Mutex
	tasks     map[string]*protocol.SubmittedTask
	submitted []protocol.CallRequest
	calls     []protocol.CallRequest
	submitErr error
	ctxResult json.RawMessage
}

func (f *fakeLibrarian) Submit(ctx context.Context, req protocol.CallRequest, deadline time.Duration) (*protocol.Submitted, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ctx.Err() != nil {
		return nil, protocol.Errorf(protocol.CodeTimeout, "submission cut short: %v", ctx.Err())
	}
	if f.submitErr != nil {
		return nil, f.submitErr
	}
	f.submitted = append(f.submitted, req)
	id := fmt.Sprintf("task-%d", len(f.submitted))
	now := time.Now().UTC()
	f.tasks[id] = &protocol.SubmittedTask{TaskID: id, AgentID: req.To, RequestID: req.CorrelationID, Capability: req.Action,
		State: protocol.TaskPending, Submitted: now, Deadline: now.Add(deadline)}
	return &protocol.Submitted{TaskID: id, AgentID: req.To, State: protocol.TaskPending}, nil
}

func (f *fakeLibrarian) TaskWait(_ context.Context, id string, _ time.Duration, _ func(json.RawMessage)) (*protocol.SubmittedTask, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tasks[id]
	if t == nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "this node submitted no task %s that it remembers", id)
	}
	c := *t
	switch {
	case c.Error != nil:
		e := *c.Error
		return &c, &e
	case !c.State.Final():
		return &c, protocol.Errorf(protocol.CodeTimeout, "task %s has not ended yet (%s)", id, c.State)
	}
	return &c, nil
}

func (f *fakeLibrarian) Call(_ context.Context, req protocol.CallRequest) (*protocol.Response, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, req)
	return &protocol.Response{CorrelationID: req.CorrelationID, Status: protocol.StatusSuccess, Result: f.ctxResult}, nil
}

func (f *fakeLibrarian) finish(id string, state protocol.TaskState, result string, e *protocol.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := f.tasks[id]
	t.State, t.Error = state, e
	if result != "" {
		t.Result = json.RawMessage(result)
	}
}

const (
	tokClaude  = "claude-token-0123456789"
	tokCopilot = "copilot-token-0123456789"
)

func seed003Tokens(t testing.TB) *rpc.Tokens {
	t.Helper()
	tk, err := rpc.ParseTokens([]byte(`{"tokens":[{"name":"claude-3","token":"` + tokClaude + `"},{"name":"copilot-2","token":"` + tokCopilot + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// newLibrarian is a node (self) that knows a connected provider of every
// librarian:* capability, and an unconnected one of librarian:approval
// with a lower id, which must not be chosen.
func newLibrarian(t testing.TB) (*fakeLibrarian, string) {
	t.Helper()
	var ids [3]string
	for i := range ids {
		s := newSigner(t)
		ids[i] = s.IDString()
	}
	self, prov, idle := ids[0], ids[1], ids[2]
	all := caps("librarian:approval", "librarian:query", "librarian:validate", "librarian:report", "librarian:context")
	f := &fakeLibrarian{tasks: map[string]*protocol.SubmittedTask{}, ctxResult: json.RawMessage(`{"documents":["auth.md"]}`)}
	f.self = protocol.PeerInfo{AgentID: self, Capabilities: caps("echo")}
	// The idle provider's id sorts first, so the connected one is chosen
	// by being connected.
	if prov < idle {
		prov, idle = idle, prov
	}
	f.peers = []protocol.PeerInfo{
		{AgentID: idle, Capabilities: caps("librarian:approval")},
		{AgentID: prov, Capabilities: all, Connected: true},
	}
	return f, prov
}

type answer struct {
	code   int
	header http.Header
	body   []byte
}

func (a answer) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("answer %d %s: %v", a.code, a.body, err)
	}
}

func (a answer) wantError(t *testing.T, code int, pcode protocol.Code, contains string) {
	t.Helper()
	if a.code != code {
		t.Fatalf("status %d, want %d: %s", a.code, code, a.body)
	}
	var e localapi.ErrorResponse
	if err := protocol.DecodeStrict(a.body, &e); err != nil || e.Code != pcode || !strings.Contains(e.Error, contains) {
		t.Fatalf("error %s (%v), want code %s and a message with %q", a.body, err, pcode, contains)
	}
}

func do(t *testing.T, h http.Handler, method, path, token, body string) answer {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return answer{code: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

const approval = `{"agent_id":"claude-3","session_id":"sess-123","request_type":"APPROVAL","action":"create","target_type":"design",
	"target_path":"docs/design/new-feature.md","content":"# New Feature Design\n...","rationale":"Implementing user story US-123",
	"references":["arch-001","req-045"],"deviations":[]}`

func TestSeed003Auth(t *testing.T) {
	f, _ := newLibrarian(t)
	h := localapi.NewSeed003(f, localapi.WithTokens(seed003Tokens(t)))
	off := localapi.NewSeed003(f)
	endpoints := []struct {
		method, path, body string
		ok                 int
	}{
		{"POST", "/agent/request", approval, 202},
		{"GET", "/agent/status/task-1", "", 200},
		{"POST", "/agent/context", `{"agent_id":"claude-3","query":"What are the current authentication requirements?"}`, 200},
		{"GET", "/agent/capabilities", "", 200},
	}
	for _, e := range endpoints {
		t.Run(e.method+" "+e.path, func(t *testing.T) {
			a := do(t, h, e.method, e.path, "", e.body)
			a.wantError(t, 401, protocol.CodeUnauthorized, "Agent not authorized")
			if !strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate %q", a.header.Get("WWW-Authenticate"))
			}
			do(t, h, e.method, e.path, "not-a-token-of-this-node", e.body).wantError(t, 401, protocol.CodeUnauthorized, "Agent not authorized")
			do(t, off, e.method, e.path, tokClaude, e.body).wantError(t, 404, protocol.CodeUnauthorized, "--agent-tokens")
			if a := do(t, h, e.method, e.path, tokClaude, e.body); a.code != e.ok {
				t.Fatalf("with a valid token: %d %s, want %d", a.code, a.body, e.ok)
			}
		})
	}
	t.Run("docs need no token", func(t *testing.T) {
		for _, s := range []*localapi.Seed003{h, off} {
			if a := do(t, s, "GET", "/docs", "", ""); a.code != 200 || !bytes.Equal(a.body, localapi.OpenAPI()) {
				t.Fatalf("GET /docs: %d", a.code)
			}
		}
	})
	t.Run("wrong method and unknown path", func(t *testing.T) {
		a := do(t, h, "GET", "/agent/request", tokClaude, "")
		a.wantError(t, 405, protocol.CodeInvalidMessage, "takes POST")
		if a.header.Get("Allow") != "POST" {
			t.Errorf("Allow %q", a.header.Get("Allow"))
		}
		do(t, h, "GET", "/agent/elsewhere", tokClaude, "").wantError(t, 404, protocol.CodeInvalidMessage, "no such path")
		do(t, h, "GET", "/agent/status/a/b", tokClaude, "").wantError(t, 404, protocol.CodeInvalidMessage, "no such path")
	})
}

func TestSeed003RequestAndStatus(t *testing.T) {
	f, prov := newLibrarian(t)
	h := localapi.NewSeed003(f, localapi.WithTokens(seed003Tokens(t)))
	a := do(t, h, "POST", "/agent/request", tokClaude, approval)
	if a.code != 202 {
		t.Fatalf("submit: %d %s", a.code, a.body)
	}
	var lr localapi.LibrarianResponse
	a.decode(t, &lr)
	if lr.RequestID != "task-1" || lr.Status != "pending" || lr.State != protocol.TaskPending || lr.Provider != prov || lr.Capability != "librarian:approval" || lr.Timestamp.IsZero() {
		t.Fatalf("response %s", a.body)
	}
	f.mu.Lock()
	sub := f.submitted[0]
	f.mu.Unlock()
	var sent localapi.AgentRequest
	if err := protocol.DecodeStrict(sub.Params, &sent); err != nil || sent.AgentID != "claude-3" || sent.Rationale != "Implementing user story US-123" || *sent.TargetPath != "docs/design/new-feature.md" {
		t.Fatalf("params %s (%v)", sub.Params, err)
	}
	if sub.To != prov || sub.Action != "librarian:approval" || !strings.HasPrefix(sub.CorrelationID, "seed003:claude-3:") {
		t.Fatalf("submitted %+v", sub)
	}

	status := func(token, id string) (answer, localapi.RequestStatus) {
		a := do(t, h, "GET", "/agent/status/"+id, token, "")
		var st localapi.RequestStatus
		if a.code == 200 {
			a.decode(t, &st)
		}
		return a, st
	}
	if a, st := status(tokClaude, "task-1"); a.code != 200 || st.State != protocol.TaskPending || st.Final || st.Response != nil || st.Provider != prov {
		t.Fatalf("pending status %d %s", a.code, a.body)
	}
	// Another agent's token does not see it, nor an unknown id.
	a, _ = status(tokCopilot, "task-1")
	a.wantError(t, 404, protocol.CodeInvalidMessage, "no request")
	a, _ = status(tokClaude, "task-99")
	a.wantError(t, 404, protocol.CodeInvalidMessage, "no request")
	do(t, h, "GET", "/agent/status/task-1?verbose=1", tokClaude, "").wantError(t, 400, protocol.CodeInvalidMessage, "no query parameters")

	f.finish("task-1", protocol.TaskEscalated, "", nil)
	if a, st := status(tokClaude, "task-1"); a.code != 200 || st.State != protocol.TaskEscalated || st.Final {
		t.Fatalf("escalated status %s", a.body)
	}
	f.finish("task-1", protocol.TaskCompleted, `{"status":"approved","confidence":0.9,"feedback":"fits the design","approved_location":"docs/design/new-feature.md","extra":1}`, nil)
	a, st := status(tokClaude, "task-1")
	if a.code != 200 || st.State != protocol.TaskCompleted || !st.Final || st.Response == nil {
		t.Fatalf("completed status %s", a.body)
	}
	if r := st.Response; r.Status != "approved" || r.Feedback != "fits the design" || *r.Confidence != 0.9 || *r.ApprovedLocation != "docs/design/new-feature.md" || r.RequestID != "task-1" {
		t.Fatalf("response %s", a.body)
	}

	// A librarian that rejects fails the task with its LibrarianResponse
	// in the error's details: that is the decision.
	do(t, h, "POST", "/agent/request", tokClaude, `{"agent_id":"claude-3","request_type":"VALIDATE","target_type":"code","content":"x"}`)
	f.finish("task-2", protocol.TaskRejected, "", protocol.Errorf(protocol.CodeInvalidMessage, "request rejected").
		WithDetails(json.RawMessage(`{"status":"non_compliant","feedback":"1 violation","violations":[{"rule":"naming","description":"x"}],"state":"REJECTED"}`)))
	a, st = status(tokClaude, "task-2")
	if a.code != 200 || st.State != protocol.TaskRejected || st.Response.Status != "non_compliant" || st.Response.Feedback != "1 violation" || len(st.Response.Violations) != 1 {
		t.Fatalf("rejected status %s", a.body)
	}

	// A failed task is rejected with the error as feedback.
	do(t, h, "POST", "/agent/request", tokClaude, `{"agent_id":"claude-3","request_type":"QUERY","content":"what?"}`)
	f.finish("task-3", protocol.TaskFailed, "", protocol.Errorf(protocol.CodeInternalError, "handler crashed"))
	a, st = status(tokClaude, "task-3")
	if a.code != 200 || st.State != protocol.TaskFailed || st.Error == nil || st.Response.Status != "rejected" || st.Response.Feedback != "handler crashed" || st.Capability != "librarian:query" {
		t.Fatalf("failed status %s", a.body)
	}
}

func TestSeed003RequestRefusals(t *testing.T) {
	big := `{"agent_id":"claude-3","request_type":"QUERY","content":"` + strings.Repeat("a", localapi.MaxAgentRequestBytes) + `"}`
	refs := `["r0"` + strings.Repeat(`,"r"`, localapi.MaxReferences) + `]`
	tests := []struct {
		name, body string
		status     int
		code       protocol.Code
		contains   string
	}{
		{"not JSON", `{"agent_id":`, 400, protocol.CodeInvalidMessage, "not valid JSON"},
		{"not an object", `["APPROVAL"]`, 400, protocol.CodeInvalidMessage, "must be a JSON object"},
		{"empty", ``, 400, protocol.CodeInvalidMessage, "must be a JSON object"},
		{"wrong type", `{"agent_id":3,"request_type":"QUERY","content":"x"}`, 400, protocol.CodeInvalidMessage, `member "agent_id" must be a string, not a number`},
		{"wrong list type", `{"agent_id":"claude-3","request_type":"QUERY","content":"x","references":"arch-001"}`, 400, protocol.CodeInvalidMessage, `"references" must be an array`},
		{"wrong deviation type", `{"agent_id":"claude-3","request_type":"QUERY","content":"x","deviations":[{"rule":1}]}`, 400, protocol.CodeInvalidMessage, "must be a string"},
		{"bad timestamp", `{"agent_id":"claude-3","request_type":"QUERY","content":"x","timestamp":"yesterday"}`, 400, protocol.CodeInvalidMessage, "timestamp"},
		{"unknown member", `{"agent_id":"claude-3","request_type":"QUERY","content":"x","priority":1}`, 400, protocol.CodeInvalidMessage, `unknown field "priority"`},
		{"duplicate member", `{"agent_id":"claude-3","agent_id":"copilot-2","request_type":"QUERY","content":"x"}`, 400, protocol.CodeInvalidMessage, "duplicate"},
		{"no request type", `{"agent_id":"claude-3","content":"x"}`, 400, protocol.CodeInvalidMessage, `"request_type" is required`},
		{"unknown request type", `{"agent_id":"claude-3","request_type":"DEPLOY","content":"x"}`, 400, protocol.CodeInvalidMessage, "not one of APPROVAL"},
		{"unknown action", `{"agent_id":"claude-3","request_type":"QUERY","action":"rm","content":"x"}`, 400, protocol.CodeInvalidMessage, "action"},
		{"unknown target type", `{"agent_id":"claude-3","request_type":"VALIDATE","target_type":"infra","content":"x"}`, 400, protocol.CodeInvalidMessage, "target_type"},
		{"approval needs rationale", `{"agent_id":"claude-3","request_type":"APPROVAL","target_type":"code","content":"x"}`, 400, protocol.CodeInvalidMessage, "needs rationale"},
		{"report needs its members", `{"agent_id":"claude-3","request_type":"REPORT","request_id":"task-1"}`, 400, protocol.CodeInvalidMessage, "needs completed, changes_made"},
		{"too many references", `{"agent_id":"claude-3","request_type":"QUERY","content":"x","references":` + refs + `}`, 400, protocol.CodeInvalidMessage, "references; at most 20"},
		{"content too large", `{"agent_id":"claude-3","request_type":"QUERY","content":"` + strings.Repeat("a", localapi.MaxContentBytes+1) + `"}`, 400, protocol.CodeInvalidMessage, "content is"},
		{"body too large", big, 413, protocol.CodeInvalidMessage, "larger than"},
		{"another agent's id", strings.Replace(approval, "claude-3", "copilot-2", 1), 403, protocol.CodeUnauthorized, "Agent not authorized"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, _ := newLibrarian(t)
			h := localapi.NewSeed003(f, localapi.WithTokens(seed003Tokens(t)))
			do(t, h, "POST", "/agent/request", tokClaude, tt.body).wantError(t, tt.status, tt.code, tt.contains)
			if len(f.submitted) != 0 {
				t.Fatal("a refused request was submitted")
			}
		})
	}
	t.Run("REPORT with its members", func(t *testing.T) {
		f, _ := newLibrarian(t)
		h := localapi.NewSeed003(f, localapi.WithTokens(seed003Tokens(t)))
		if a := do(t, h, "POST", "/agent/request", tokClaude, `{"agent_id":"claude-3","request_type":"REPORT","request_id":"task-1","completed":true,"changes_made":[]}`); a.code != 202 {
			t.Fatalf("%d %s", a.code, a.body)
		}
	})
	t.Run("a client gone does not cut the submission short", func(t *testing.T) {
		f, _ := newLibrarian(t)
		h := localapi.NewSeed003(f, localapi.WithTokens(seed003Tokens(t)))
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req := httptest.NewRequestWithContext(ctx, "POST", "/agent/request", strings.NewReader(approval))
		req.Header.Set("Authorization", "Bearer "+tokClaude)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != 202 || len(f.submitted) != 1 {
			t.Fatalf("%d %s", rec.Code, rec.Body)
		}
	})
	t.Run("no provider", func(t *testing.T) {
		f, _ := newLibrarian(t)
		f.peers = nil
		h := localapi.NewSeed003(f, localapi.WithTokens(seed003Tokens(t)))
		do(t, h, "POST", "/agent/request", tokClaude, approval).wantError(t, 503, protocol.CodeCapabilityNotSupported, "librarian:approval")
	})
	t.Run("provider refuses", func(t *testing.T) {
		f, _ := newLibrarian(t)
		f.submitErr = protocol.Errorf(protocol.CodeRateLimited, "the provider holds 1024 detached tasks")
		h := localapi.NewSeed003(f, localapi.WithTokens(seed003Tokens(t)))
		do(t, h, "POST", "/agent/request", tokClaude, approval).wantError(t, 429, protocol.CodeRateLimited, "1024 detached tasks")
	})
}

func TestSeed003RateLimit(t *testing.T) {
	f, _ := newLibrarian(t)
	h := localapi.NewSeed003(f, localapi.WithTokens(seed003Tokens(t)), localapi.WithRequestsPerMinute(2))
	for i := range 2 {
		if a := do(t, h, "POST", "/agent/request", tokClaude, approval); a.code != 202 {
			t.Fatalf("request %d: %d %s", i, a.code, a.body)
		}
	}
	a := do(t, h, "POST", "/agent/request", tokClaude, approval)
	a.wantError(t, 429, protocol.CodeRateLimited, "Rate limit exceeded: 2 requests per minute for agent claude-3")
	if s, err := strconv.Atoi(a.header.Get("Retry-After")); err != nil || s < 1 || s > 30 {
		t.Fatalf("Retry-After %q, want 1 to 30 seconds", a.header.Get("Retry-After"))
	}
	// The context endpoint draws on the same bucket; another agent's is
	// its own.
	do(t, h, "POST", "/agent/context", tokClaude, `{"agent_id":"claude-3","query":"q"}`).wantError(t, 429, protocol.CodeRateLimited, "Rate limit exceeded")
	if a := do(t, h, "POST", "/agent/request", tokCopilot, strings.Replace(approval, "claude-3", "copilot-2", 1)); a.code != 202 {
		t.Fatalf("another agent: %d %s", a.code, a.body)
	}
	if len(f.submitted) != 3 {
		t.Fatalf("%d submitted, want 3", len(f.submitted))
	}
	var ac localapi.AgentCapabilities
	do(t, h, "GET", "/agent/capabilities", tokClaude, "").decode(t, &ac)
	if ac.RateLimit != "2/minute" {
		t.Fatalf("rate_limit %q", ac.RateLimit)
	}
}

func TestSeed003Context(t *testing.T) {
	f, prov := newLibrarian(t)
	h := localapi.NewSeed003(f, localapi.WithTokens(seed003Tokens(t)))
	a := do(t, h, "POST", "/agent/context", tokClaude, `{"agent_id":"claude-3","query":"What are the current authentication requirements?","target_type":"docs","max_results":5}`)
	var cr localapi.ContextResponse
	a.decode(t, &cr)
	if a.code != 200 || cr.Provider != prov || string(cr.Context) != `{"documents":["auth.md"]}` || !strings.HasPrefix(cr.RequestID, "seed003:claude-3:") {
		t.Fatalf("context %d %s", a.code, a.body)
	}
	if c := f.calls[0]; c.Action != "librarian:context" || c.To != prov || !strings.Contains(string(c.Params), `"query":"What are the current authentication requirements?"`) {
		t.Fatalf("call %+v %s", c, c.Params)
	}
	for _, tt := range []struct{ body, contains string }{
		{`{"agent_id":"claude-3"}`, `"query" is required`},
		{`{"agent_id":"claude-3","query":["a"]}`, `member "query" must be a string, not an array`},
		{`{"agent_id":"claude-3","query":"q","max_results":"5"}`, `member "max_results" must be an integer`},
		{`{"agent_id":"claude-3","query":"q","max_results":0}`, "max_results must be 1 to 1000"},
		{`{"agent_id":"claude-3","query":"q","target_type":"infra"}`, "target_type"},
		{`7`, "must be a JSON object"},
	} {
		do(t, h, "POST", "/agent/context", tokClaude, tt.body).wantError(t, 400, protocol.CodeInvalidMessage, tt.contains)
	}
	do(t, h, "POST", "/agent/context", tokClaude, `{"agent_id":"copilot-2","query":"q"}`).wantError(t, 403, protocol.CodeUnauthorized, "Agent not authorized")
	f.ctxResult = json.RawMessage(`"just text"`)
	do(t, h, "POST", "/agent/context", tokClaude, `{"agent_id":"claude-3","query":"q"}`).wantError(t, 502, protocol.CodeInternalError, "JSON object")
}

func TestSeed003Capabilities(t *testing.T) {
	f, prov := newLibrarian(t)
	h := localapi.NewSeed003(f, localapi.WithTokens(seed003Tokens(t)))
	a := do(t, h, "GET", "/agent/capabilities", tokCopilot, "")
	var ac localapi.AgentCapabilities
	a.decode(t, &ac)
	if a.code != 200 || ac.AgentID != "copilot-2" || ac.RateLimit != "60/minute" || ac.MaxRequestSize != localapi.MaxAgentRequestBytes {
		t.Fatalf("capabilities %s", a.body)
	}
	if q := ac.RequestTypes["QUERY"]; q.Capability != "librarian:query" || !slices.Equal(q.Providers, []string{prov}) {
		t.Fatalf("QUERY %+v", q)
	}
	if ap := ac.RequestTypes["APPROVAL"]; len(ap.Providers) != 2 || len(ac.RequestTypes) != 4 {
		t.Fatalf("request types %+v", ac.RequestTypes)
	}
	want := []string{"echo", "librarian:approval", "librarian:context", "librarian:query", "librarian:report", "librarian:validate"}
	if !slices.Equal(ac.Capabilities, want) || ac.Context.Capability != "librarian:context" {
		t.Fatalf("capabilities %v, want %v", ac.Capabilities, want)
	}
}

// TestOpenAPIDocument checks the document GET /docs serves against the
// code: it is the embedded file, it is JSON describing exactly the five
// paths, and every schema names exactly the members of its Go type.
func TestOpenAPIDocument(t *testing.T) {
	file, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(file, localapi.OpenAPI()) {
		t.Fatal("the embedded document is not openapi.json")
	}
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
		Comps   struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
				Required   []string       `json:"required"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(file, &doc); err != nil || !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("not an OpenAPI 3 document: %v", err)
	}
	paths := map[string]string{}
	for p, ops := range doc.Paths {
		for m := range ops {
			paths[p] = m
		}
		if len(ops) != 1 {
			t.Errorf("%s has %d operations", p, len(ops))
		}
	}
	want := map[string]string{"/agent/request": "post", "/agent/status/{request_id}": "get", "/agent/context": "post", "/agent/capabilities": "get", "/docs": "get"}
	if !reflect.DeepEqual(paths, want) {
		t.Fatalf("paths %v, want %v", paths, want)
	}
	types := map[string]any{"AgentRequest": localapi.AgentRequest{}, "LibrarianResponse": localapi.LibrarianResponse{}, "RequestStatus": localapi.RequestStatus{},
		"ContextQuery": localapi.ContextQuery{}, "ContextResponse": localapi.ContextResponse{}, "AgentCapabilities": localapi.AgentCapabilities{},
		"RequestType": localapi.RequestType{}, "Error": localapi.ErrorResponse{}}
	for name, v := range types {
		s, ok := doc.Comps.Schemas[name]
		if !ok {
			t.Errorf("no schema %s", name)
			continue
		}
		var got, members, required []string
		for p := range s.Properties {
			got = append(got, p)
		}
		collectMembers(reflect.TypeOf(v), &members, &required)
		slices.Sort(got)
		slices.Sort(members)
		if !slices.Equal(got, members) {
			t.Errorf("schema %s has %v, the Go type %v", name, got, members)
		}
		for _, r := range required {
			if !slices.Contains(s.Required, r) {
				t.Errorf("schema %s does not require %s", name, r)
			}
		}
	}
}

// collectMembers lists the JSON member names of struct type t (embedded
// structs flattened), and those tagged required.
func collectMembers(t reflect.Type, names, required *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			collectMembers(f.Type, names, required)
			continue
		}
		tag := strings.Split(f.Tag.Get("json"), ",")
		*names = append(*names, tag[0])
		if slices.Contains(tag[1:], "required") {
			*required = append(*required, tag[0])
		}
	}
}

// TestSeed003OverHTTP runs the surface behind a real HTTP server, as the
// node serves it, with a client that sends the seed's JSON.
func TestSeed003OverHTTP(t *testing.T) {
	f, _ := newLibrarian(t)
	srv := httptest.NewServer(localapi.NewSeed003(f, localapi.WithTokens(seed003Tokens(t))))
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/agent/request", strings.NewReader(approval))
	req.Header.Set("Authorization", "Bearer "+tokClaude)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 202 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
}
