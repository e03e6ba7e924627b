package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

// TestSeed003REST drives seed 003's REST surface of a running node with a
// plain HTTP client: node B serves it (--agent-tokens), its peer A offers
// librarian:approval, librarian:validate (a handler that fails) and
// librarian:context (exec handlers). The client submits the seed's
// APPROVAL example through POST /agent/request and polls GET
// /agent/status/{request_id} until the mesh task is COMPLETED with A's
// decision; sees a VALIDATE request end FAILED, rejected; asks POST
// /agent/context; is refused without a
// token, with another agent's id, and past its rate limit; and reads the
// OpenAPI document at /docs.
func TestSeed003REST(t *testing.T) {
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	capsJSON, _ := json.Marshal([]any{
		map[string]any{"name": "librarian:approval", "handler": map[string]any{"exec": []string{"sh", "-c",
			`cat > /dev/null; echo '{"status":"approved","confidence":0.9,"feedback":"fits the design","approved_location":"docs/design/new-feature.md"}'`}}},
		map[string]any{"name": "librarian:validate", "handler": map[string]any{"exec": []string{"sh", "-c",
			`cat > /dev/null; echo 'template missing' >&2; exit 3`}}},
		map[string]any{"name": "librarian:context", "handler": map[string]any{"exec": []string{"sh", "-c",
			`cat > /dev/null; echo '{"documents":["docs/auth.md"]}'`}}},
	})
	writeFile(t, caps, string(capsJSON))
	const token = "claude-3-token-0123456789"
	tokens := filepath.Join(dir, "agents.json")
	writeFile(t, tokens, `{"tokens":[{"name":"claude-3","token":"`+token+`"}]}`)
	a := startNode(t, "librarian", "--data", filepath.Join(dir, "a"), "--capabilities", caps)
	b := startNode(t, "gateway", "--data", filepath.Join(dir, "b"), "--bootstrap", a.started.Addrs[0],
		"--agent-tokens", tokens, "--agent-rate", "6")

	base := "http://" + b.started.API

	do := func(method, path, tok, body string) (int, http.Header, []byte) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header, out
	}

	// B knows A as the provider of APPROVAL requests (no rate cost).
	wait.For(t, 30*time.Second, func() error {
		code, _, body := do("GET", "/agent/capabilities", token, "")
		var ac struct {
			RequestTypes map[string]struct {
				Providers []string `json:"providers"`
			} `json:"request_types"`
		}
		if code != 200 || json.Unmarshal(body, &ac) != nil || !slices.Contains(ac.RequestTypes["APPROVAL"].Providers, a.started.AgentID) {
			return fmt.Errorf("capabilities %d %s", code, body)
		}
		return nil
	})
	if code, _, body := do("GET", "/docs", "", ""); code != 200 || !strings.Contains(string(body), `"/agent/status/{request_id}"`) {
		t.Fatalf("GET /docs: %d %.200s", code, body)
	}

	request := `{"agent_id":"claude-3","session_id":"sess-123","request_type":"APPROVAL","action":"create","target_type":"design",
		"target_path":"docs/design/new-feature.md","content":"# New Feature Design\n...","rationale":"Implementing user story US-123",
		"references":["arch-001","req-045"],"deviations":[]}`
	if code, h, body := do("POST", "/agent/request", "", request); code != 401 || !strings.Contains(string(body), `"code":"UNAUTHORIZED"`) || h.Get("WWW-Authenticate") == "" {
		t.Fatalf("without a token: %d %s", code, body)
	}
	if code, _, body := do("POST", "/agent/request", token, strings.Replace(request, "claude-3", "copilot-2", 1)); code != 403 {
		t.Fatalf("another agent's id: %d %s", code, body)
	}
	if code, _, body := do("POST", "/agent/request", token, `{"agent_id":"claude-3","request_type":7}`); code != 400 || !strings.Contains(string(body), `member \"request_type\" must be a string`) {
		t.Fatalf("wrong type: %d %s", code, body)
	}

	code, _, body := do("POST", "/agent/request", token, request)
	var sub struct {
		RequestID string `json:"request_id"`
		Status    string `json:"status"`
		Provider  string `json:"provider"`
	}
	if code != 202 || json.Unmarshal(body, &sub) != nil || sub.RequestID == "" || sub.Status != "pending" || sub.Provider != a.started.AgentID {
		t.Fatalf("POST /agent/request: %d %s", code, body)
	}
	var st struct {
		State    string `json:"state"`
		Final    bool   `json:"final"`
		Response struct {
			RequestID        string `json:"request_id"`
			Status           string `json:"status"`
			Feedback         string `json:"feedback"`
			ApprovedLocation string `json:"approved_location"`
		} `json:"response"`
	}
	wait.For(t, 60*time.Second, func() error {
		code, _, body := do("GET", "/agent/status/"+sub.RequestID, token, "")
		if code != 200 || json.Unmarshal(body, &st) != nil || st.State != "COMPLETED" {
			return fmt.Errorf("status %d %s", code, body)
		}
		return nil
	})
	if r := st.Response; !st.Final || r.RequestID != sub.RequestID || r.Status != "approved" || r.Feedback != "fits the design" || r.ApprovedLocation != "docs/design/new-feature.md" {
		t.Fatalf("final status %+v", st)
	}
	// The task is a mesh task of B's: the CLI lists it too.
	if res := meshagent(t, "task", "list", "--json", "--api", b.started.API).must(t, 0); !strings.Contains(res.stdout, sub.RequestID) {
		t.Fatalf("task list does not show %s: %s", sub.RequestID, res.stdout)
	}

	// A handler that fails: the task ends FAILED, and the response is a
	// rejection with the error as feedback.
	code, _, body = do("POST", "/agent/request", token, `{"agent_id":"claude-3","request_type":"VALIDATE","target_type":"docs","content":"x"}`)
	if code != 202 || json.Unmarshal(body, &sub) != nil || sub.RequestID == "" {
		t.Fatalf("POST /agent/request VALIDATE: %d %s", code, body)
	}
	var failed struct {
		State string `json:"state"`
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
		Response struct {
			Status   string `json:"status"`
			Feedback string `json:"feedback"`
		} `json:"response"`
	}
	wait.For(t, 60*time.Second, func() error {
		code, _, body := do("GET", "/agent/status/"+sub.RequestID, token, "")
		if code != 200 || json.Unmarshal(body, &failed) != nil || failed.State != "FAILED" {
			return fmt.Errorf("status %d %s", code, body)
		}
		return nil
	})
	if failed.Error == nil || failed.Response.Status != "rejected" || failed.Response.Feedback == "" {
		t.Fatalf("failed task %+v", failed)
	}

	code, _, body = do("POST", "/agent/context", token, `{"agent_id":"claude-3","query":"What are the current authentication requirements?"}`)
	if code != 200 || !strings.Contains(string(body), `"context":{"documents":["docs/auth.md"]}`) {
		t.Fatalf("POST /agent/context: %d %s", code, body)
	}

	// The limit is checked after the token and before the body: the 403,
	// the 400, the two 202s and the context query spent five of the six a
	// minute, so within a few more (one comes back every 10 s) the answer
	// is 429.
	limited := false
	for range 6 {
		code, h, body := do("POST", "/agent/request", token, `{"agent_id":"claude-3","request_type":"QUERY","content":"q"}`)
		if code == 429 {
			if h.Get("Retry-After") == "" || !strings.Contains(string(body), "Rate limit exceeded") {
				t.Fatalf("429 without Retry-After or the seed's words: %v %s", h, body)
			}
			limited = true
			break
		}
	}
	if !limited {
		t.Fatal("no 429 past --agent-rate 6")
	}
}
