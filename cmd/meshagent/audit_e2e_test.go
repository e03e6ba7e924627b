package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
)

// TestAuditLog: nodes started with --audit record the calls they send and
// serve; history --direct and GET /api/v1/messages read them (bodies only
// with --audit-bodies), filters work, and a node without --audit says how
// to get one.
func TestAuditLog(t *testing.T) {
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[{"name": "echo", "description": "returns its params", "handler": {"builtin": "echo"}}]`)
	provider := startNode(t, "provider", "--data", filepath.Join(dir, "p"), "--capabilities", caps, "--audit-bodies")
	caller := startNode(t, "caller", "--data", filepath.Join(dir, "c"), "--bootstrap", provider.started.Addrs[0], "--audit")
	id := provider.started.AgentID
	wait.For(t, 30*time.Second, func() error {
		_, err := capabilitiesOf(t, caller.started.API, id)
		return err
	})
	for i := range 3 {
		meshagent(t, "call", id, "echo", "--params", fmt.Sprintf(`{"n":%d}`, i), "--api", caller.started.API).must(t, 0)
	}
	meshagent(t, "call", id, "nope", "--api", caller.started.API)

	entries := func(api string, args ...string) []protocol.AuditEntry {
		res := meshagent(t, append([]string{"history", "--direct", "--json", "--api", api}, args...)...).must(t, 0)
		var out []protocol.AuditEntry
		for _, line := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
			if line == "" {
				continue
			}
			var e protocol.AuditEntry
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("line %q: %v", line, err)
			}
			out = append(out, e)
		}
		return out
	}
	// Records are written off the call's path, within a fraction of a second.
	var sent []protocol.AuditEntry
	wait.For(t, 20*time.Second, func() error {
		if sent = entries(caller.started.API); len(sent) < 4 {
			return fmt.Errorf("%d records on the caller", len(sent))
		}
		return nil
	})
	outcomes := map[string]int{}
	for _, e := range sent {
		if e.Direction != protocol.CallSent || e.From != caller.started.AgentID || e.To != id || len(e.Params) != 0 {
			t.Fatalf("caller's record %+v", e)
		}
		outcomes[e.Capability+" "+e.Outcome]++
	}
	if outcomes["echo success"] != 3 || outcomes["nope "+string(protocol.CodeCapabilityNotSupported)] != 1 {
		t.Fatalf("caller's outcomes %v", outcomes)
	}
	var served []protocol.AuditEntry
	wait.For(t, 20*time.Second, func() error {
		if served = entries(provider.started.API, "--agent", caller.started.AgentID, "--since", "1h"); len(served) < 3 {
			return fmt.Errorf("%d records on the provider", len(served))
		}
		return nil
	})
	withBody := 0
	for _, e := range served {
		if e.Direction != protocol.CallServed || e.From != caller.started.AgentID || e.To != id {
			t.Fatalf("provider's record %+v", e)
		}
		if e.Capability == "echo" && strings.Contains(string(e.Params), `"n":`) {
			withBody++
		}
	}
	if withBody != 3 {
		t.Fatalf("%d of the provider's echo records carry their params, want 3 (--audit-bodies): %+v", withBody, served)
	}
	if got := entries(provider.started.API, "--agent", provider.started.AgentID, "--until", "2000-01-01T00:00:00Z"); len(got) != 0 {
		t.Fatalf("--until in the past: %d records", len(got))
	}

	// The same log over seed 004's REST face, paged.
	resp, err := http.Get("http://" + caller.started.API + "/api/v1/messages?limit=2")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var page struct {
		Messages []protocol.AuditEntry `json:"messages"`
		Count    int                   `json:"count"`
		Next     string                `json:"next"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &page) != nil || page.Count != 2 || page.Next != page.Messages[1].ID {
		t.Fatalf("GET /api/v1/messages?limit=2: %d %s", resp.StatusCode, body)
	}
	resp, err = http.Get("http://" + caller.started.API + "/api/v1/messages?limit=2&before=" + page.Next)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var next struct {
		Messages []protocol.AuditEntry `json:"messages"`
	}
	if json.Unmarshal(body, &next) != nil || len(next.Messages) != 2 || next.Messages[0].ID == page.Messages[0].ID || next.Messages[0].ID == page.Messages[1].ID {
		t.Fatalf("second page: %s", body)
	}
	for _, bad := range []string{"?limit=0", "?limit=x", "?topic=a", "?agent=nobody", "?since=yesterday"} {
		resp, err := http.Get("http://" + caller.started.API + "/api/v1/messages" + bad)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET /api/v1/messages%s: %d, want 400", bad, resp.StatusCode)
		}
	}

	// Without --audit: a clear refusal, not an empty log.
	plain := startNode(t, "plain", "--data", filepath.Join(dir, "x"))
	res := meshagent(t, "history", "--direct", "--api", plain.started.API)
	if res.code == 0 || !strings.Contains(res.stderr, "--audit") {
		t.Fatalf("history --direct on a node without --audit: %d %q", res.code, res.stderr)
	}
	meshagent(t, "history", "--direct", "--topic", "x", "--api", plain.started.API).must(t, 2)
}
