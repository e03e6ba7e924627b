package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

// TestSeed002Bindings drives a node with a seed 002 client written in
// Node.js from the seed's text alone (testdata/seed002_client.mjs: its own
// key, base64 ids, its own canonical signing): hello and a request over
// POST /agentprotocol, a tampered request refused, a request over
// /agentprotocol/ws, and one through the --exchange directory. Each
// request goes through node B to provider A, which admits B's envelope
// clients only ("<B>/agentprotocol:*"), so the vouching is exercised.
func TestSeed002Bindings(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("Node.js (node) is not on PATH; the seed 002 client is JavaScript")
	}
	dir := t.TempDir()
	keyB := filepath.Join(dir, "b.key")
	var idB struct {
		AgentID string `json:"agentId"`
	}
	if err := json.Unmarshal([]byte(meshagent(t, "id", "--key", keyB, "--json").must(t, 0).stdout), &idB); err != nil {
		t.Fatal(err)
	}
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, fmt.Sprintf(`[{"name": "echo", "handler": "echo", "authorized_requester_ids": ["%s/agentprotocol:*"]}]`, idB.AgentID))
	a := startNode(t, "provider", "--data", filepath.Join(dir, "a"), "--capabilities", caps)
	exchange := filepath.Join(dir, "exchange")
	b := startNode(t, "gateway", "--key", keyB, "--data", filepath.Join(dir, "b"), "--bootstrap", a.started.Addrs[0], "--exchange", exchange)
	wait.For(t, 30*time.Second, func() error {
		got, err := capabilitiesOf(t, b.started.API, a.started.AgentID)
		if err != nil || len(got) != 1 {
			return fmt.Errorf("B sees A offering %v (%v)", got, err)
		}
		return nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--experimental-websocket", "--no-warnings", filepath.Join("testdata", "seed002_client.mjs"),
		b.started.API, b.started.PublicKey, a.started.PublicKey, exchange)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("seed 002 client: %v\n%s", err, out)
	}
	type step struct {
		Step       string          `json:"step"`
		Type       string          `json:"type"`
		From       string          `json:"from"`
		Payload    json.RawMessage `json:"payload"`
		HasReceipt bool            `json:"hasReceipt"`
		Status     int             `json:"status"`
		Code       string          `json:"code"`
	}
	steps := map[string]step{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var s step
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("client printed %q: %v", line, err)
		}
		steps[s.Step] = s
	}
	if s := steps["http-hello"]; s.Type != "hello" || s.From != b.started.PublicKey {
		t.Errorf("hello answer %+v: want B's hello, its id as a base64 key", s)
	}
	for _, name := range []string{"http-request", "ws", "file"} {
		s := steps[name]
		var p struct {
			Status string          `json:"status"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(s.Payload, &p); err != nil || s.Type != "response" || p.Status != "success" || !s.HasReceipt {
			t.Errorf("%s: %+v (%v): want a success response with A's receipt", name, s, err)
		}
	}
	if s := steps["http-tampered"]; s.Status != 401 || s.Code != "INVALID_SIGNATURE" {
		t.Errorf("tampered request answered %+v, want 401 INVALID_SIGNATURE", s)
	}
	// The file request was claimed once.
	processed, err := os.ReadDir(filepath.Join(exchange, "processed"))
	if err != nil || len(processed) != 1 {
		t.Errorf("processed/ holds %d files (%v), want 1", len(processed), err)
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("the client ran out of time")
	}
}
