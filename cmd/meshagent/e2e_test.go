//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/meshagent/meshagent/internal/wait"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// binary is the meshagent executable TestMain builds.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "meshagent-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "meshagent")
	build := exec.Command(goTool(), "build", "-o", binary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build meshagent:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// goTool is the go command running this test, falling back to PATH.
func goTool() string {
	if root := os.Getenv("GOROOT"); root != "" {
		if p := filepath.Join(root, "bin", "go"); fileExists(p) {
			return p
		}
	}
	return "go"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// env is the environment of every child: no MESHAGENT_* or GOLOG_*
// variable of the user's, and a home directory of the test's own.
func env(t testing.TB) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "MESHAGENT_") || strings.HasPrefix(k, "BUB_") || strings.HasPrefix(k, "GOLOG_") || k == "HOME" {
			continue
		}
		out = append(out, kv)
	}
	return append(out, "HOME="+t.TempDir())
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type result struct {
	code           int
	stdout, stderr string
}

// meshagent runs a short-lived command to completion.
func meshagent(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = env(t)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("meshagent %v: %v", args, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
}

func (r result) must(t *testing.T, code int) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	return r
}

// nodeProc is a `meshagent node` process.
type nodeProc struct {
	name    string
	cmd     *exec.Cmd
	stdout  *syncBuffer
	stderr  *syncBuffer
	exited  chan struct{}
	waitErr error
	started struct {
		AgentID   string   `json:"agentId"`
		PublicKey string   `json:"publicKey"`
		Addrs     []string `json:"addrs"`
		API       string   `json:"api"`
		WS        string   `json:"ws"`
	}
}

// startNode starts a node process and waits for its start line.
func startNode(t testing.TB, name string, args ...string) *nodeProc {
	t.Helper()
	return startCommand(t, "node", name, args...)
}

// startCommand starts `meshagent node` or `meshagent relay` and waits for
// its start line.
func startCommand(t testing.TB, command, name string, args ...string) *nodeProc {
	t.Helper()
	return startCommandEnv(t, nil, command, name, args...)
}

// startCommandEnv is startCommand with extra environment variables.
func startCommandEnv(t testing.TB, extraEnv []string, command, name string, args ...string) *nodeProc {
	t.Helper()
	cmd := exec.Command(binary, commandArgs(command, name, args...)...)
	cmd.Env = append(env(t), extraEnv...)
	return launch(t, name, cmd)
}

// commandArgs are the arguments of a test's `meshagent node` or
// `meshagent relay`: JSON start line, no mDNS, loopback API, a quick
// heartbeat, then args.
func commandArgs(command, name string, args ...string) []string {
	return append([]string{command, "--json", "--no-mdns", "--name", name,
		"--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0", "--heartbeat", "500ms"}, args...)
}

// launch starts cmd, a node or relay process, and waits for its start line.
func launch(t testing.TB, name string, cmd *exec.Cmd) *nodeProc {
	t.Helper()
	p := &nodeProc{name: name, cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, p.stderr)
		}
	})
	wait.For(t, 30*time.Second, func() error {
		select {
		case <-p.exited:
			t.Fatalf("%s exited before starting: %v\n%s", name, p.waitErr, p.stderr)
		default:
		}
		line, _, ok := strings.Cut(p.stdout.String(), "\n")
		if !ok {
			return fmt.Errorf("%s has not printed its start line", name)
		}
		return json.Unmarshal([]byte(line), &p.started)
	})
	return p
}

func (p *nodeProc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("signal %s: %v", p.name, err)
	}
}

// logged reports whether the node logged a line containing every part.
func (p *nodeProc) logged(parts ...string) bool {
	for _, line := range strings.Split(p.stderr.String(), "\n") {
		if !slices.ContainsFunc(parts, func(s string) bool { return !strings.Contains(line, s) }) {
			return true
		}
	}
	return false
}

// stop sends SIGTERM and requires a clean exit (status 0) within d.
func (p *nodeProc) stop(t *testing.T, d time.Duration) {
	t.Helper()
	p.signal(t, syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(d):
		t.Fatalf("%s did not exit within %s of SIGTERM", p.name, d)
	}
	if p.waitErr != nil {
		t.Fatalf("%s did not exit cleanly: %v\n%s", p.name, p.waitErr, p.stderr)
	}
	if !p.logged(`msg="shutdown complete"`) {
		t.Errorf("%s did not log its clean stop:\n%s", p.name, p.stderr)
	}
}

type peerInfo struct {
	AgentID      string `json:"agentId"`
	Name         string `json:"name"`
	Connected    bool   `json:"connected"`
	Capabilities []struct {
		Name string `json:"name"`
	} `json:"capabilities"`
}

// capabilitiesOf returns what the node at api knows agent id offers.
func capabilitiesOf(t *testing.T, api, id string) ([]string, error) {
	res := meshagent(t, "peers", "--json", "--api", api)
	if res.code != 0 {
		return nil, fmt.Errorf("peers exited %d: %s", res.code, res.stderr)
	}
	var peers []peerInfo
	if err := json.Unmarshal([]byte(res.stdout), &peers); err != nil {
		return nil, fmt.Errorf("peers --json %q: %v", res.stdout, err)
	}
	for _, p := range peers {
		if p.AgentID == id {
			var names []string
			for _, c := range p.Capabilities {
				names = append(names, c.Name)
			}
			return names, nil
		}
	}
	return nil, fmt.Errorf("%s is not among the peers: %s", id, res.stdout)
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTwoNodes runs two node processes on loopback, B bootstrapping to A,
// and drives them with the CLI as a user would.
func TestTwoNodes(t *testing.T) {
	dir := t.TempDir()
	keyA, keyB := filepath.Join(dir, "a.key"), filepath.Join(dir, "b.key")
	var idA, idB struct {
		AgentID string `json:"agentId"`
		Created bool   `json:"created"`
	}
	if err := json.Unmarshal([]byte(meshagent(t, "id", "--key", keyA, "--json").must(t, 0).stdout), &idA); err != nil || !idA.Created {
		t.Fatalf("id A: %+v %v", idA, err)
	}
	if err := json.Unmarshal([]byte(meshagent(t, "id", "--key", keyB, "--json").must(t, 0).stdout), &idB); err != nil {
		t.Fatal(err)
	}

	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[
		{"name": "echo", "description": "returns its params", "handler": {"builtin": "echo"}},
		{"name": "upper", "description": "upper-cases its params",
		 "input_schema": {"type": "object", "required": ["text"]},
		 "handler": {"exec": ["sh", "-c", "tr a-z A-Z"], "timeout": "10s"}}
	]`)

	// A reloads its capabilities on SIGHUP only, so that the SIGHUP test
	// below fails if the signal does nothing.
	policy := filepath.Join(dir, "policy.json")
	writeFile(t, policy, `{"default": {"allowed_capabilities": ["all"]}}`)
	a := startNode(t, "alice", "--key", keyA, "--data", filepath.Join(dir, "a"), "--capabilities", caps, "--capabilities-poll", "0", "--policy", policy)
	if a.started.AgentID != idA.AgentID {
		t.Fatalf("node A runs as %s, want %s", a.started.AgentID, idA.AgentID)
	}
	b := startNode(t, "bob", "--key", keyB, "--data", filepath.Join(dir, "b"), "--bootstrap", a.started.Addrs[0])

	// Each logs the other's hello.
	wait.For(t, 30*time.Second, func() error {
		if !b.logged("msg=hello", "remote_peer="+idA.AgentID, "name=alice") {
			return errors.New("B has not logged A's hello")
		}
		if !a.logged("msg=hello", "remote_peer="+idB.AgentID, "name=bob") {
			return errors.New("A has not logged B's hello")
		}
		return nil
	})
	got, err := capabilitiesOf(t, b.started.API, idA.AgentID)
	if err != nil || !slices.Equal(got, []string{"echo", "upper"}) {
		t.Fatalf("B sees A offering %v (%v), want [echo upper]", got, err)
	}

	t.Run("call echo", func(t *testing.T) {
		res := meshagent(t, "call", idA.AgentID, "echo", "--params", `{"text":"hi"}`, "--api", b.started.API, "--json").must(t, 0)
		var resp struct {
			CorrelationID string          `json:"correlationId"`
			Status        string          `json:"status"`
			Result        json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &resp); err != nil {
			t.Fatalf("stdout %q: %v", res.stdout, err)
		}
		if resp.Status != "success" || string(resp.Result) != `{"text":"hi"}` || resp.CorrelationID == "" {
			t.Errorf("response %s", res.stdout)
		}
	})
	t.Run("call exec capability", func(t *testing.T) {
		res := meshagent(t, "call", idA.AgentID, "upper", "--params", `{"text":"hi"}`, "--api", b.started.API).must(t, 0)
		if want := "{\n  \"TEXT\": \"HI\"\n}\n"; res.stdout != want {
			t.Errorf("stdout %q, want %q", res.stdout, want)
		}
	})
	t.Run("params failing the input schema", func(t *testing.T) {
		res := meshagent(t, "call", idA.AgentID, "upper", "--params", `{"txt":"hi"}`, "--api", b.started.API).must(t, 3)
		if !strings.Contains(res.stderr, "INVALID_MESSAGE") {
			t.Errorf("stderr %q", res.stderr)
		}
	})
	t.Run("unknown capability", func(t *testing.T) {
		res := meshagent(t, "call", idA.AgentID, "shout", "--params", `{"text":"hi"}`, "--api", b.started.API, "--json").must(t, 6)
		var pe struct {
			Code string `json:"code"`
		}
		if err := json.Unmarshal([]byte(res.stdout), &pe); err != nil || pe.Code != "CAPABILITY_NOT_SUPPORTED" {
			t.Errorf("stdout %q (%v)", res.stdout, err)
		}
		if !strings.Contains(res.stderr, "it offers: echo, upper") {
			t.Errorf("stderr %q", res.stderr)
		}
	})
	t.Run("peers table", func(t *testing.T) {
		// Columns: agent id, name, status, heartbeat age, connected,
		// latency, capabilities, first address.
		wait.For(t, 30*time.Second, func() error {
			res := meshagent(t, "peers", "--api", b.started.API).must(t, 0)
			lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
			if len(lines) != 2 || !strings.HasPrefix(lines[0], "AGENT ID") {
				t.Fatalf("peers table:\n%s", res.stdout)
			}
			f := strings.Fields(lines[1])
			if len(f) != 8 || f[0] != idA.AgentID || f[1] != "alice" || f[2] != "available" || f[3] == "-" ||
				f[4] != "yes" || f[6] != "echo,upper" || !strings.HasPrefix(f[7], "/ip4/127.0.0.1/tcp/") {
				return fmt.Errorf("peers row %q", lines[1])
			}
			return nil
		})
	})

	t.Run("SIGHUP reloads capabilities", func(t *testing.T) {
		writeFile(t, caps, `[{"name": "echo", "handler": "echo"}, {"name": "shout", "handler": {"builtin": "echo"}}]`)
		a.signal(t, syscall.SIGHUP)
		wait.For(t, 30*time.Second, func() error {
			got, err := capabilitiesOf(t, b.started.API, idA.AgentID)
			if err != nil {
				return err
			}
			if !slices.Equal(got, []string{"echo", "shout"}) {
				return fmt.Errorf("B sees A offering %v", got)
			}
			return nil
		})
		meshagent(t, "call", idA.AgentID, "shout", "--api", b.started.API).must(t, 0)

		// A file that does not load keeps the current set.
		writeFile(t, caps, `[{"name": "echo"}]`)
		a.signal(t, syscall.SIGHUP)
		wait.For(t, 30*time.Second, func() error {
			if !a.logged("capabilities not reloaded", "handler") {
				return errors.New("A has not logged the failed reload")
			}
			return nil
		})
		meshagent(t, "call", idA.AgentID, "shout", "--api", b.started.API).must(t, 0)
	})

	t.Run("a policy change takes effect without a restart", func(t *testing.T) {
		writeFile(t, policy, `{"rules": [{"name": "no-bob", "agents": ["`+idB.AgentID+`"], "allowed_capabilities": ["shout"]}]}`)
		a.signal(t, syscall.SIGHUP)
		wait.For(t, 30*time.Second, func() error {
			res := meshagent(t, "call", idA.AgentID, "echo", "--api", b.started.API)
			if res.code != 10 || !strings.Contains(res.stderr, "policy no-bob does not allow") {
				return fmt.Errorf("call exited %d: %s", res.code, res.stderr)
			}
			return nil
		})
		meshagent(t, "call", idA.AgentID, "shout", "--api", b.started.API).must(t, 0)
		// A policy file that does not load keeps the current policy.
		writeFile(t, policy, `{"rules": "nope"}`)
		a.signal(t, syscall.SIGHUP)
		wait.For(t, 30*time.Second, func() error {
			if !a.logged("policy not reloaded") {
				return errors.New("A has not logged the failed policy reload")
			}
			return nil
		})
		meshagent(t, "call", idA.AgentID, "echo", "--api", b.started.API).must(t, 10)
	})

	// SIGTERM shuts both down cleanly.
	b.stop(t, 20*time.Second)
	a.stop(t, 20*time.Second)
	res := meshagent(t, "peers", "--api", a.started.API).must(t, 1)
	if !strings.Contains(res.stderr, "no meshagent node is listening on "+a.started.API) {
		t.Errorf("stderr %q", res.stderr)
	}
}
