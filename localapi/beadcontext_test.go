package localapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/protocol"
)

// fakeContexts answers with what it was given and records it.
type fakeContexts struct {
	mu   sync.Mutex
	last string // "op bead value [members]"
}

func (f *fakeContexts) answer(op, bead string, v json.RawMessage, members ...[]string) (*protocol.BeadContext, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.last = op + " " + bead + " " + string(v)
	if len(members) > 0 && members[0] != nil {
		f.last += fmt.Sprint(" ", members[0])
	}
	switch bead {
	case "private":
		return nil, protocol.Errorf(protocol.CodeUnauthorized, "bead %s: this agent is not one of its members", bead)
	case "bad":
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "bead id %q refused", bead)
	case "many":
		return nil, protocol.Errorf(protocol.CodeRateLimited, "too many beads")
	}
	if v == nil {
		v = json.RawMessage(`{"files_modified":["src/auth.go"]}`)
	}
	return &protocol.BeadContext{BeadID: bead, CollaboratingAgents: []string{"agent-1"}, SharedContext: v,
		Version: protocol.BeadVersion{Wall: 1, Agent: "agent-1"}, Patches: 1}, nil
}

func (f *fakeContexts) ContextGet(_ context.Context, bead string) (*protocol.BeadContext, error) {
	return f.answer("get", bead, nil)
}

func (f *fakeContexts) ContextSet(_ context.Context, bead string, doc json.RawMessage, members []string) (*protocol.BeadContext, error) {
	return f.answer("set", bead, doc, members)
}

func (f *fakeContexts) ContextPatch(_ context.Context, bead string, patch json.RawMessage, members []string) (*protocol.BeadContext, error) {
	return f.answer("patch", bead, patch, members)
}

// TestBeadContextREST: seed 004's GET/POST/PATCH
// /api/v1/beads/{bead_id}/context reach the node with the bead and body
// as sent and answer the seed's member names; bodies that are not one
// JSON object, other media types, oversize bodies, query parameters and
// the node's refusals get the documented status codes, and a refused
// request never reaches the node.
func TestBeadContextREST(t *testing.T) {
	f := &fakeContexts{}
	srv := httptest.NewServer(localapi.BeadContextHandler(f))
	defer srv.Close()
	do := func(method, path, ctype, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := do("GET", "/api/v1/beads/bead-abc-123/context", "", "")
	var got map[string]any
	if err := json.Unmarshal([]byte(body), &got); code != 200 || err != nil {
		t.Fatalf("GET: %d %s", code, body)
	}
	for _, k := range []string{"bead_id", "collaborating_agents", "shared_context", "version", "patches", "refused", "message_history"} {
		if _, ok := got[k]; !ok {
			t.Errorf("GET answer lacks %q: %s", k, body)
		}
	}
	if code, body := do("PATCH", "/api/v1/beads/bead-abc-123/context", "application/merge-patch+json", ` {"review_status":"done","x":null} `); code != 200 || f.last != `patch bead-abc-123 {"review_status":"done","x":null}` {
		t.Fatalf("PATCH: %d %s (node got %q)", code, body, f.last)
	}
	if code, body := do("POST", "/api/v1/beads/b1/context", "application/json; charset=utf-8", `{"a":1}`); code != 200 || f.last != `set b1 {"a":1}` {
		t.Fatalf("POST: %d %s (node got %q)", code, body, f.last)
	}
	if code, body := do("POST", "/api/v1/beads/b1/context?members=agent-2,agent-3&members=agent-4", "", `{"a":1}`); code != 200 || f.last != `set b1 {"a":1} [agent-2 agent-3 agent-4]` {
		t.Fatalf("POST with members: %d %s (node got %q)", code, body, f.last)
	}
	f.last = ""
	for _, tc := range []struct {
		method, path, ctype, body string
		want                      int
	}{
		{"POST", "/api/v1/beads/b1/context", "application/json", `[1]`, 400},
		{"POST", "/api/v1/beads/b1/context", "application/json", `"x"`, 400},
		{"POST", "/api/v1/beads/b1/context", "application/json", ``, 400},
		{"POST", "/api/v1/beads/b1/context", "application/merge-patch+json", `{}`, 415},
		{"PATCH", "/api/v1/beads/b1/context", "text/plain", `{}`, 415},
		{"PATCH", "/api/v1/beads/b1/context", "application/json", `{"a":"` + strings.Repeat("x", 300<<10) + `"}`, 413},
		{"PATCH", "/api/v1/beads/b1/context?force=1", "application/json", `{}`, 400},
		{"GET", "/api/v1/beads/b1/context?x=1", "", ``, 400},
		{"GET", "/api/v1/beads/b1/context?members=a", "", ``, 400},
		{"PATCH", "/api/v1/beads/b1/context?members=a,,b", "application/json", `{}`, 400},
		{"PATCH", "/api/v1/beads/b1/context?members=" + strings.Repeat("a,", 64) + "a", "application/json", `{}`, 400},
		{"PUT", "/api/v1/beads/b1/context", "application/json", `{}`, 405},
		{"GET", "/api/v1/beads/b1", "", ``, 404},
	} {
		if code, body := do(tc.method, tc.path, tc.ctype, tc.body); code != tc.want || (code != 405 && code != 404 && !strings.Contains(body, `"error"`)) {
			t.Errorf("%s %s %s: %d %.80s, want %d", tc.method, tc.path, tc.ctype, code, body, tc.want)
		}
	}
	if f.last != "" {
		t.Fatalf("a refused request reached the node: %q", f.last)
	}
	if code, _ := do("PATCH", "/api/v1/beads/bad/context", "", `{}`); code != 400 {
		t.Errorf("node's INVALID_MESSAGE: %d, want 400", code)
	}
	if code, body := do("PATCH", "/api/v1/beads/private/context", "", `{}`); code != 403 || !strings.Contains(body, "not one of its members") {
		t.Errorf("node's UNAUTHORIZED: %d %s, want 403", code, body)
	}
	if code, _ := do("GET", "/api/v1/beads/many/context", "", ``); code != 429 {
		t.Errorf("node's RATE_LIMITED: %d, want 429", code)
	}
}
