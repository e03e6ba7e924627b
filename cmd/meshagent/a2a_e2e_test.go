//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

// a2aNPM is the folder of the A2A tests' npm dependencies (@a2a-js/sdk
// 1.3.0 and express), installed by `npm ci` there.
const a2aNPM = "../../a2a/testdata/npm"

// needA2ANPM skips a test when node or the installed npm packages are
// missing.
func needA2ANPM(t *testing.T) string {
	t.Helper()
	nodeJS, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node (Node.js) is not installed; the A2A interop tests need it")
	}
	if !fileExists(filepath.Join(a2aNPM, "node_modules", "@a2a-js", "sdk", "package.json")) {
		t.Skipf("@a2a-js/sdk is not installed: run `npm ci` in %s", filepath.Clean(filepath.Join("a2a", "testdata", "npm")))
	}
	return nodeJS
}

// startJSAgent runs the @a2a-js/sdk server of agent.mjs and returns its
// base URL.
func startJSAgent(t *testing.T, nodeJS string) string {
	t.Helper()
	cmd := exec.Command(nodeJS, "agent.mjs")
	cmd.Dir = a2aNPM
	cmd.Env = env(t)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	line := wait.Receive(t, 30*time.Second, lines, "the JS agent's URL")
	var started struct {
		URL string `json:"url"`
	}
	if err := json.Unmarshal([]byte(line), &started); err != nil || started.URL == "" {
		t.Fatalf("JS agent printed %q: %v", line, err)
	}
	return started.URL
}

var servingA2A = regexp.MustCompile(`msg="serving A2A" url=(http://\S+)`)

// TestA2AInterop runs two nodes and a gateway as processes and drives them
// with @a2a-js/sdk 1.3.0: its card resolver and signature verifier on the
// node's own card and a mesh agent's (each signed by its own agent), its
// client (send, stream, get, cancel), and its server as an external agent
// whose skills the provider serves on the mesh through the "a2a" handler.
func TestA2AInterop(t *testing.T) {
	nodeJS := needA2ANPM(t)
	jsAgent := startJSAgent(t, nodeJS)

	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[
		{"name": "upper", "description": "upper-cases its params", "keywords": ["text"],
		 "handler": {"exec": ["sh", "-c", "tr a-z A-Z"], "timeout": "10s"}},
		{"name": "slow", "handler": {"exec": ["sleep", "60"], "timeout": "90s"}},
		{"name": "shout", "description": "an A2A agent's skill", "handler": {"a2a": {"url": "`+jsAgent+`", "skill": "shout", "timeout": "20s"}}},
		{"name": "refuse", "handler": {"a2a": {"url": "`+jsAgent+`", "skill": "refuse"}}}
	]`)
	prov := startNode(t, "provider", "--data", filepath.Join(dir, "p"), "--capabilities", caps)
	gwNode := startNode(t, "gateway-node", "--data", filepath.Join(dir, "g"), "--bootstrap", prov.started.Addrs[0])
	wait.For(t, 30*time.Second, func() error {
		got, err := capabilitiesOf(t, gwNode.started.API, prov.started.AgentID)
		if err != nil {
			return err
		}
		if !slices.Contains(got, "shout") {
			return fmt.Errorf("the gateway's node sees %v", got)
		}
		return nil
	})

	gw := exec.Command(binary, "a2a", "--api", gwNode.started.API, "--listen", "127.0.0.1:0")
	gw.Env = env(t)
	gwProc := launchPlain(t, "a2a", gw)
	var base string
	wait.For(t, 30*time.Second, func() error {
		m := servingA2A.FindStringSubmatch(gwProc.stderr.String())
		if m == nil {
			return errors.New("the gateway has not logged its URL")
		}
		base = m[1]
		return nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := exec.CommandContext(ctx, nodeJS, "client.mjs", base, gwNode.started.AgentID, prov.started.AgentID)
	client.Dir = a2aNPM
	client.Env = env(t)
	out, err := client.Output()
	if err != nil {
		var stderr []byte
		if ee := new(exec.ExitError); errors.As(err, &ee) {
			stderr = ee.Stderr
		}
		t.Fatalf("client.mjs: %v\n%s\n%s", err, out, stderr)
	}
	var got struct {
		OwnKid, ProviderKid                                       string
		Skills                                                    []string
		Interface                                                 struct{ URL, ProtocolBinding, ProtocolVersion string }
		TamperedVerified                                          bool
		Send, Shout, Refuse, Get, SlowBefore, Cancel, AfterCancel taskSummary
		Stream                                                    []map[string]json.RawMessage
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output %s: %v", out, err)
	}
	t.Logf("client saw %s", out)
	checks := []struct {
		what string
		ok   bool
	}{
		{"the node's card is signed by the node", got.OwnKid == gwNode.started.AgentID},
		{"the provider's card is signed by the provider", got.ProviderKid == prov.started.AgentID},
		{"a tampered card does not verify", !got.TamperedVerified},
		{"skills are the provider's capabilities", slices.Equal(got.Skills, []string{"refuse", "shout", "slow", "upper"})},
		{"the card names the JSON-RPC endpoint", got.Interface.URL == base+"/agents/"+prov.started.AgentID+"/" && got.Interface.ProtocolBinding == "JSONRPC" && got.Interface.ProtocolVersion == "1.0"},
		{"SendMessage completes with the result as data", got.Send.State == "TASK_STATE_COMPLETED" && string(got.Send.Data) == `{"TEXT":"HI"}`},
		{"an A2A agent's skill answers through the mesh", got.Shout.State == "TASK_STATE_COMPLETED" && string(got.Shout.Data) == `{"loud":"HELLO"}`},
		{"an A2A agent's failure is INTERNAL_ERROR", got.Refuse.State == "TASK_STATE_FAILED" && strings.HasPrefix(got.Refuse.Text, "INTERNAL_ERROR: ") && strings.Contains(got.Refuse.Text, "refused skill refuse")},
		{"GetTask returns the completed task", got.Get.ID == got.Send.ID && got.Get.State == "TASK_STATE_COMPLETED"},
		{"a returnImmediately task is running", got.SlowBefore.State == "TASK_STATE_SUBMITTED" || got.SlowBefore.State == "TASK_STATE_WORKING"},
		{"CancelTask answers CANCELED", got.Cancel.State == "TASK_STATE_CANCELED" && got.AfterCancel.State == "TASK_STATE_CANCELED"},
		{"the stream starts and ends with the task", len(got.Stream) >= 2 && got.Stream[0]["task"] != nil && got.Stream[len(got.Stream)-1]["task"] != nil},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("%s: no", c.what)
		}
	}
	if n := len(got.Stream); n >= 1 {
		var final taskSummary
		_ = json.Unmarshal(got.Stream[n-1]["task"], &final)
		if final.State != "TASK_STATE_COMPLETED" || string(final.Data) != `{"TEXT":"STREAM"}` {
			t.Errorf("the stream's final task %+v", final)
		}
	}
	// The mesh task was cancelled on the provider, not only in the gateway.
	wait.For(t, 30*time.Second, func() error {
		res := meshagent(t, "task", "status", got.Cancel.ID, "--agent", prov.started.AgentID, "--api", gwNode.started.API, "--json")
		if !strings.Contains(res.stdout, `"CANCELLED"`) {
			return fmt.Errorf("mesh task: %s %s", res.stdout, res.stderr)
		}
		return nil
	})
}

type taskSummary struct {
	ID    string
	State string
	Data  json.RawMessage
	Text  string
}

// launchPlain starts a process that prints no start line and stops it at
// the end of the test.
func launchPlain(t *testing.T, name string, cmd *exec.Cmd) *nodeProc {
	t.Helper()
	p := &nodeProc{name: name, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, p.stderr)
		}
	})
	return p
}
