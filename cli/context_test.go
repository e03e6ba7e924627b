package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/protocol"
)

// TestContextCommand: `meshagent context set|patch|get` change and read a
// bead's shared context through a real node's local API, and seed 004's
// REST on the same listener reads the same document; malformed
// invocations are usage errors and never reach the node, and the node's
// refusals exit non-zero with its reason.
func TestContextCommand(t *testing.T) {
	n := meshtest.Node(t, 274)
	api := serveAPI(t, n)
	res := runCLI(t, "", "context", "set", "bead-abc-123", `{"files_modified":["src/auth.go"],"review_status":"in_progress"}`, "--api", api)
	res.wantCode(t, 0)
	res = runCLI(t, `{"review_status":"done","files_modified":null,"test_results":{"passed":14}}`, "context", "patch", "bead-abc-123", "-", "--api", api)
	res.wantCode(t, 0)
	if !strings.Contains(res.stdout, `"review_status": "done"`) || strings.Contains(res.stdout, "files_modified") {
		t.Fatalf("patch printed %s", res.stdout)
	}
	res = runCLI(t, "", "context", "get", "bead-abc-123", "--json", "--api", api)
	res.wantCode(t, 0)
	var got protocol.BeadContext
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil {
		t.Fatalf("--json: %v: %s", err, res.stdout)
	}
	want := `{"review_status":"done","test_results":{"passed":14}}`
	if string(got.SharedContext) != want || got.Patches != 2 || got.Version.Agent != n.AgentID() {
		t.Fatalf("get --json: %+v", got)
	}
	// Seed 004's REST on the same listener.
	resp, err := http.Get("http://" + api + "/api/v1/beads/bead-abc-123/context")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var rest protocol.BeadContext
	if err := json.Unmarshal(body, &rest); resp.StatusCode != 200 || err != nil || string(rest.SharedContext) != want {
		t.Fatalf("GET /api/v1/beads/bead-abc-123/context: %d %s", resp.StatusCode, body)
	}
	req, _ := http.NewRequest(http.MethodPatch, "http://"+api+"/api/v1/beads/bead-abc-123/context", strings.NewReader(`{"decision_needed":false}`))
	req.Header.Set("Content-Type", "application/merge-patch+json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 200 {
		t.Fatalf("PATCH: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}

	for _, args := range [][]string{
		{"context"},
		{"context", "get"},
		{"context", "frob", "b1"},
		{"context", "set", "b1"},
		{"context", "set", "b1", `[1]`},
		{"context", "patch", "b1", `nope`},
		{"context", "patch", "b1", `{"a":1,"a":2}`},
		{"context", "get", "b1", "extra"},
		{"context", "get", "b1", "--members", "x"},
		{"context", "set", "b1", `{}`, "--members", "x,,y"},
	} {
		res := runCLI(t, "", append(args, "--api", api)...)
		res.wantCode(t, ExitUsage)
	}
	res = runCLI(t, "", "context", "get", "a/b", "--api", api)
	if res.code == 0 || !strings.Contains(res.stderr, "bead id") {
		t.Fatalf("bad bead id: %d %s", res.code, res.stderr)
	}
	res = runCLI(t, "", "context", "get", "bead-abc-123", "--api", api)
	res.wantCode(t, 0)
	if !strings.Contains(res.stdout, `"decision_needed": false`) {
		t.Fatalf("after the REST PATCH: %s", res.stdout)
	}

	// --members: the creator names another member, then leaves; its next
	// change is refused, with the node's reason.
	other := meshtest.ID(t, 999).String()
	res = runCLI(t, "", "context", "set", "bead-members", `{"a":1}`, "--members", other, "--json", "--api", api)
	res.wantCode(t, 0)
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil || len(got.CollaboratingAgents) != 2 {
		t.Fatalf("set --members: %v %s", err, res.stdout)
	}
	res = runCLI(t, "", "context", "patch", "bead-members", `{"b":2}`, "--members", other, "--json", "--api", api)
	res.wantCode(t, 0)
	if err := json.Unmarshal([]byte(res.stdout), &got); err != nil || len(got.CollaboratingAgents) != 1 || got.CollaboratingAgents[0] != other {
		t.Fatalf("patch --members: %v %s", err, res.stdout)
	}
	res = runCLI(t, "", "context", "patch", "bead-members", `{"c":3}`, "--api", api)
	res.wantCode(t, ExitCodeFor(protocol.CodeUnauthorized))
	if !strings.Contains(res.stderr, "not one of its members") {
		t.Fatalf("a non-member's patch: %s", res.stderr)
	}
}
