package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/sign"
)

// wire is the part of an envelope the test reads.
type wire struct {
	ID   string `json:"id"`
	From struct {
		AgentID string `json:"agentId"`
	} `json:"from"`
	To struct {
		AgentID string `json:"agentId"`
	} `json:"to"`
	Type    string `json:"type"`
	Payload struct {
		Action        string          `json:"action"`
		CorrelationID string          `json:"correlationId"`
		Params        json.RawMessage `json:"params"`
		Status        string          `json:"status"`
		Result        json.RawMessage `json:"result"`
		Code          string          `json:"code"`
	} `json:"payload"`
}

// verifyOffline checks doc's signature with the sign package alone: the
// key is the one inlined in from.agentId.
func verifyOffline(doc []byte) error {
	body, sig, err := sign.Detach(doc)
	if err != nil {
		return err
	}
	var w wire
	if err := json.Unmarshal(body, &w); err != nil {
		return err
	}
	id, err := sign.ParseAgentID(w.From.AgentID)
	if err != nil {
		return err
	}
	pub, err := sign.PublicKey(id)
	if err != nil {
		return err
	}
	return sign.VerifyKey(pub, body, sig)
}

func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	var out bytes.Buffer
	if err := run(ctx, &out, dir); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"hello: reviewer offers reviewer:code-review (reviews a unified diff: a rating and suggestions)",
		`progress: {"files":1,"stage":"diff read"}`,
		"response: success, rating needs-work, 3 suggestions on src/auth.go",
		"  - resolve the TODO before merging: // TODO: rate-limit failed logins",
		"  - log with log/slog, not fmt.Println",
		"add tests: the diff touches no test file",
		"schema-violating request: INVALID_MESSAGE",
		"error    reviewer  -> requester verified INVALID_MESSAGE",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	ids := map[string]string{} // role -> agent id
	for _, role := range []string{"reviewer", "requester"} {
		_, after, ok := strings.Cut(out.String(), role+":")
		if !ok {
			t.Fatalf("output names no %s:\n%s", role, out.String())
		}
		ids[role] = strings.Fields(after)[0]
	}

	// The transcript in wire order: every envelope verifies against its
	// sender's key, and the seed 002 flow is all there.
	f, err := os.Open(filepath.Join(dir, "transcript.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var docs [][]byte
	var envs []wire
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		doc := append([]byte(nil), sc.Bytes()...)
		if err := verifyOffline(doc); err != nil {
			t.Errorf("envelope does not verify: %v\n%s", err, doc)
		}
		var w wire
		if err := json.Unmarshal(doc, &w); err != nil {
			t.Fatal(err)
		}
		docs, envs = append(docs, doc), append(envs, w)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	helloFrom := map[string]bool{}
	var requests []wire
	answers := map[string][]wire{} // correlation id -> responses and errors, in order
	for _, w := range envs {
		switch w.Type {
		case "hello":
			helloFrom[w.From.AgentID] = true
		case "request":
			if w.From.AgentID != ids["requester"] || w.To.AgentID != ids["reviewer"] || w.Payload.Action != ReviewCapability {
				t.Errorf("unexpected request %+v", w)
			}
			requests = append(requests, w)
		case "response", "error":
			if w.From.AgentID != ids["reviewer"] || w.To.AgentID != ids["requester"] {
				t.Errorf("unexpected %s %+v", w.Type, w)
			}
			answers[w.Payload.CorrelationID] = append(answers[w.Payload.CorrelationID], w)
		}
	}
	if !helloFrom[ids["reviewer"]] || !helloFrom[ids["requester"]] {
		t.Errorf("hellos from %v, want both agents", helloFrom)
	}
	if len(requests) != 2 {
		t.Fatalf("%d requests in the transcript, want 2", len(requests))
	}
	good := answers[requests[0].Payload.CorrelationID]
	if len(good) != 2 || good[0].Payload.Status != "in_progress" || good[1].Payload.Status != "success" {
		t.Errorf("review answered with %+v, want in_progress then success", good)
	} else if !bytes.Contains(good[1].Payload.Result, []byte(`"rating":"needs-work"`)) {
		t.Errorf("review result %s", good[1].Payload.Result)
	}
	if bytes.Contains(requests[1].Payload.Params, []byte(`"diff"`)) {
		t.Errorf("the second request has a diff: %s", requests[1].Payload.Params)
	}
	bad := answers[requests[1].Payload.CorrelationID]
	if len(bad) != 1 || bad[0].Type != "error" || bad[0].Payload.Code != "INVALID_MESSAGE" {
		t.Errorf("schema-violating request answered with %+v, want one INVALID_MESSAGE error", bad)
	}

	// One file per envelope, in seed 002's file-exchange naming.
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(envs) {
		t.Errorf("%d envelope files, %d envelopes in transcript.jsonl", len(files), len(envs))
	}
	for _, w := range envs {
		prefix := filepath.Join(dir, w.From.AgentID+"-"+w.To.AgentID+"-")
		suffix := "-" + w.ID + ".json"
		found := false
		for _, f := range files {
			found = found || strings.HasPrefix(f, prefix) && strings.HasSuffix(f, suffix)
		}
		if !found {
			t.Errorf("no file %s*%s", prefix, suffix)
		}
	}

	// meshagent verify accepts every file, and refuses tampered copies.
	bin := buildMeshagent(t)
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		code, stdout := verify(t, bin, doc)
		var w wire
		_ = json.Unmarshal(doc, &w)
		if code != 0 || !strings.Contains(stdout, "valid: signed by "+w.From.AgentID) {
			t.Errorf("meshagent verify %s: exit %d, %s", filepath.Base(f), code, stdout)
		}
	}
	success := docs[indexOf(envs, good[len(good)-1].ID)]
	tampered := bytes.Replace(success, []byte(`"rating":"needs-work"`), []byte(`"rating":"good"`), 1)
	if bytes.Equal(tampered, success) {
		t.Fatal("the success response has no rating to tamper with")
	}
	if err := verifyOffline(tampered); !errors.Is(err, sign.ErrInvalidSignature) {
		t.Errorf("tampered response: sign says %v, want ErrInvalidSignature", err)
	}
	if code, stdout := verify(t, bin, tampered); code != 4 {
		t.Errorf("meshagent verify of a tampered response: exit %d (%s), want 4", code, stdout)
	}
	// The reviewer's signature moved onto a request of the requester's.
	var sigOf struct {
		Signature string `json:"signature"`
	}
	_ = json.Unmarshal(success, &sigOf)
	req := docs[indexOf(envs, requests[0].ID)]
	var reqSig struct {
		Signature string `json:"signature"`
	}
	_ = json.Unmarshal(req, &reqSig)
	forged := bytes.Replace(req, []byte(reqSig.Signature), []byte(sigOf.Signature), 1)
	if err := verifyOffline(forged); err == nil {
		t.Error("a request carrying the reviewer's signature verified")
	}
	if code, stdout := verify(t, bin, forged); code != 4 {
		t.Errorf("meshagent verify of a request with a borrowed signature: exit %d (%s), want 4", code, stdout)
	}
}

func indexOf(envs []wire, id string) int {
	for i, w := range envs {
		if w.ID == id {
			return i
		}
	}
	return -1
}

// buildMeshagent builds the meshagent command into a temporary directory.
func buildMeshagent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "meshagent")
	goTool := "go"
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			goTool = p
		}
	}
	build := exec.Command(goTool, "build", "-o", bin, "github.com/meshagent/meshagent/cmd/meshagent")
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build meshagent: %v\n%s", err, msg)
	}
	return bin
}

// verify runs meshagent verify on doc and returns its exit code and output.
func verify(t *testing.T, bin string, doc []byte) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, "verify", "--data", t.TempDir())
	cmd.Stdin = bytes.NewReader(doc)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	}
	t.Fatalf("meshagent verify: %v", err)
	return -1, ""
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
