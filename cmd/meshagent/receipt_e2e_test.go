package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

// verifyStdin runs `meshagent verify ARGS < doc`.
func verifyStdin(t *testing.T, doc string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"verify"}, args...)...)
	cmd.Env = env(t)
	cmd.Stdin = strings.NewReader(doc)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	_ = cmd.Run()
	return result{code: cmd.ProcessState.ExitCode(), stdout: o.String(), stderr: e.String()}
}

// TestReceipts: a call through real node processes keeps the provider's
// signed answer (call --receipt-out), verify checks it later, and one
// byte changed makes it fail; a bus message to agent:<provider> is acked
// with the same kind of receipt.
func TestReceipts(t *testing.T) {
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[{"name": "echo", "description": "returns its params", "handler": {"builtin": "echo"}}]`)
	provider := startNode(t, "provider", "--data", filepath.Join(dir, "p"), "--capabilities", caps)
	caller := startNode(t, "caller", "--data", filepath.Join(dir, "c"), "--bootstrap", provider.started.Addrs[0])
	id := provider.started.AgentID
	wait.For(t, 30*time.Second, func() error {
		_, err := capabilitiesOf(t, caller.started.API, id)
		return err
	})

	file := filepath.Join(dir, "receipt.json")
	res := meshagent(t, "call", id, "echo", "--params", `{"text":"paid"}`, "--api", caller.started.API, "--receipt-out", file).must(t, 0)
	task, _, _ := strings.Cut(strings.TrimPrefix(res.stderr, "task "), " ")
	if !strings.Contains(res.stderr, "receipt written to "+file) || task == "" {
		t.Fatalf("stderr %q", res.stderr)
	}
	doc, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ok := verifyStdin(t, string(doc), "--provider", id, "--correlation-id", task).must(t, 0)
	if want := "valid: receipt signed by " + id + " for request " + task + " (success)\n"; ok.stdout != want {
		t.Errorf("verify said %q, want %q", ok.stdout, want)
	}

	// One byte of the result changed: the signature no longer holds.
	tampered := strings.Replace(string(doc), `"text":"paid"`, `"text":"paie"`, 1)
	bad := verifyStdin(t, tampered, "--provider", id, "--correlation-id", task).must(t, 4)
	if !strings.Contains(bad.stderr, "not a valid receipt: INVALID_SIGNATURE: signature does not verify for "+id) {
		t.Errorf("stderr %q", bad.stderr)
	}
	// Another request's id: a receipt, but not this request's.
	verifyStdin(t, string(doc), "--provider", id, "--correlation-id", "another").must(t, 3)
	// Another provider: signed, but not by the one named.
	bad = verifyStdin(t, string(doc), "--provider", caller.started.AgentID, "--correlation-id", task).must(t, 4)
	if !strings.Contains(bad.stderr, "not by the provider "+caller.started.AgentID) {
		t.Errorf("stderr %q", bad.stderr)
	}

	// The bus: a message to agent:<provider> is acked with its receipt.
	res = meshagent(t, "send-message", "--bus", "ws://"+caller.started.API+"/", "--topic", "agent:"+id,
		"--payload", `{"type":"echo","text":"by bus"}`).must(t, 0)
	var sent struct {
		Acks []struct {
			ClientID  string          `json:"client_id"`
			Processed bool            `json:"processed"`
			Receipt   json.RawMessage `json:"receipt"`
		} `json:"acks"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &sent); err != nil || len(sent.Acks) != 1 || !sent.Acks[0].Processed || sent.Acks[0].Receipt == nil {
		t.Fatalf("send-message: %v\n%s", err, res.stdout)
	}
	ok = verifyStdin(t, string(sent.Acks[0].Receipt), "--provider", id).must(t, 0)
	if !strings.HasPrefix(ok.stdout, "valid: receipt signed by "+id) {
		t.Errorf("verify said %q", ok.stdout)
	}
}
