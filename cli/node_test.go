package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/meshagent/meshagent/internal/wait"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// runningNode is `meshagent node` running in-process.
type runningNode struct {
	started nodeStarted
	stderr  *syncBuffer
	cancel  context.CancelFunc
	done    chan int
}

// startNode runs `meshagent node` with args on loopback and waits for its
// start line.
func startNode(t *testing.T, args ...string) *runningNode {
	t.Helper()
	return startCommand(t, "node", args...)
}

// startCommand runs `meshagent node` or `meshagent relay` with args on
// loopback and waits for its start line.
func startCommand(t *testing.T, command string, args ...string) *runningNode {
	t.Helper()
	var out syncBuffer
	rn := &runningNode{stderr: &syncBuffer{}, done: make(chan int, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	rn.cancel = cancel
	app := NewApp(&out, rn.stderr)
	base := []string{"meshagent", command, "--data", t.TempDir(), "--listen", "/ip4/127.0.0.1/tcp/0",
		"--api", "127.0.0.1:0", "--no-mdns", "--json"}
	go func() { rn.done <- run(ctx, app, append(base, args...)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rn.done:
		case <-time.After(20 * time.Second):
			t.Error("node did not stop")
		}
	})
	wait.For(t, 20*time.Second, func() error {
		select {
		case code := <-rn.done:
			rn.done <- code
			t.Fatalf("node exited with %d before starting:\n%s", code, rn.stderr)
		default:
		}
		line, _, ok := strings.Cut(out.String(), "\n")
		if !ok {
			return errors.New("no start line yet")
		}
		return json.Unmarshal([]byte(line), &rn.started)
	})
	return rn
}

// stop cancels the node's context (as SIGTERM does) and returns its exit
// status.
func (rn *runningNode) stop(t *testing.T) int {
	t.Helper()
	rn.cancel()
	select {
	case code := <-rn.done:
		rn.done <- code // for the cleanup
		return code
	case <-time.After(20 * time.Second):
		t.Fatal("node did not stop within 20s")
		return -1
	}
}

func TestNodeServesLocalAPI(t *testing.T) {
	caps := filepath.Join(t.TempDir(), "caps.json")
	writeFile(t, caps, `[{"name":"echo","description":"returns its params","handler":{"builtin":"echo"}}]`)
	n := startNode(t, "--capabilities", caps, "--name", "solo")
	id, api := n.started.AgentID, n.started.API
	if !strings.HasPrefix(id, "12D3KooW") || n.started.PublicKey == "" || !strings.HasPrefix(api, "127.0.0.1:") || api == "127.0.0.1:0" {
		t.Fatalf("start line %+v", n.started)
	}
	if len(n.started.Addrs) == 0 || !strings.HasSuffix(n.started.Addrs[0], "/p2p/"+id) {
		t.Errorf("addrs %v do not end in /p2p/<id>", n.started.Addrs)
	}

	t.Run("call --json", func(t *testing.T) {
		res := runCLI(t, "", "call", id, "echo", "--params", `{"text":"hi"}`, "--api", api, "--json")
		res.wantCode(t, ExitOK)
		var resp protocol.Response
		if err := json.Unmarshal([]byte(res.stdout), &resp); err != nil {
			t.Fatalf("stdout %q: %v", res.stdout, err)
		}
		if resp.Status != protocol.StatusSuccess || string(resp.Result) != `{"text":"hi"}` || resp.CorrelationID == "" {
			t.Errorf("response %+v", resp)
		}
	})
	t.Run("call for people, params from stdin", func(t *testing.T) {
		res := runCLI(t, `{"text": "from stdin"}`, "call", id, "echo", "--params", "-", "--api", api)
		res.wantCode(t, ExitOK)
		if want := "{\n  \"text\": \"from stdin\"\n}\n"; res.stdout != want {
			t.Errorf("stdout %q, want %q", res.stdout, want)
		}
	})
	t.Run("call params from a file, flags from the environment", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "params.json")
		writeFile(t, p, `{"n": 1}`)
		t.Setenv("MESHAGENT_API", api)
		t.Setenv("MESHAGENT_JSON", "true")
		res := runCLI(t, "", "call", id, "echo", "--params", "@"+p)
		res.wantCode(t, ExitOK)
		if !strings.Contains(res.stdout, `"result":{"n":1}`) {
			t.Errorf("stdout %q", res.stdout)
		}
	})
	t.Run("unknown capability", func(t *testing.T) {
		res := runCLI(t, "", "call", id, "shout", "--api", api, "--json")
		res.wantCode(t, ExitCodeFor(protocol.CodeCapabilityNotSupported))
		res.wantStderr(t, "CAPABILITY_NOT_SUPPORTED", "it offers: echo")
		var pe protocol.Error
		if err := json.Unmarshal([]byte(res.stdout), &pe); err != nil || pe.Code != protocol.CodeCapabilityNotSupported {
			t.Errorf("--json error line %q: %v", res.stdout, err)
		}
	})
	t.Run("unknown agent", func(t *testing.T) {
		_, other := newKey(t)
		res := runCLI(t, "", "call", other, "echo", "--api", api, "--timeout", "2s")
		res.wantCode(t, ExitCodeFor(protocol.CodeUnknownAgent))
		res.wantStderr(t, "UNKNOWN_AGENT")
	})
	t.Run("seed 004 discovery REST", func(t *testing.T) {
		resp, err := http.Get("http://" + api + "/api/v1/agents?capability=echo")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list struct {
			Agents []struct {
				AgentID      string   `json:"agent_id"`
				Name         string   `json:"name"`
				Capabilities []string `json:"capabilities"`
				Status       string   `json:"status"`
			} `json:"agents"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d: %v", resp.StatusCode, err)
		}
		if len(list.Agents) != 1 || list.Agents[0].AgentID != id || list.Agents[0].Name != "solo" || list.Agents[0].Status != "available" {
			t.Fatalf("agents %+v, want this node alone, available", list.Agents)
		}
		// A DNS-rebinding page names its own domain as Host: refused.
		for _, path := range []string{"/api/v1/agents", "/agentprotocol"} {
			req, err := http.NewRequest(http.MethodGet, "http://"+api+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "evil.example"
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusMisdirectedRequest {
				t.Errorf("%s with Host evil.example: %d, want 421", path, resp.StatusCode)
			}
		}
	})
	t.Run("peers", func(t *testing.T) {
		res := runCLI(t, "", "peers", "--api", api, "--json")
		res.wantCode(t, ExitOK)
		if strings.TrimSpace(res.stdout) != "[]" {
			t.Errorf("peers --json = %q, want []", res.stdout)
		}
		res = runCLI(t, "", "peers", "--api", api)
		res.wantCode(t, ExitOK)
		if res.stdout != "no peers yet\n" {
			t.Errorf("peers = %q", res.stdout)
		}
	})

	if code := n.stop(t); code != ExitOK {
		t.Fatalf("node exited %d after cancel:\n%s", code, n.stderr)
	}
	for _, want := range []string{"node started", "component=api", "shutting down", "shutdown complete"} {
		if !strings.Contains(n.stderr.String(), want) {
			t.Errorf("node log lacks %q:\n%s", want, n.stderr)
		}
	}
	if strings.Contains(n.stderr.String(), "component=relay") {
		t.Errorf("a plain node logs as the relay:\n%s", n.stderr)
	}
	res := runCLI(t, "", "peers", "--api", api)
	res.wantCode(t, ExitFailure)
	res.wantStderr(t, "no meshagent node is listening on "+api)
}

func TestNodeAPIAddressInUse(t *testing.T) {
	n := startNode(t)
	var out, errb syncBuffer
	code := run(context.Background(), NewApp(&out, &errb), []string{"meshagent", "node", "--data", t.TempDir(),
		"--listen", "/ip4/127.0.0.1/tcp/0", "--api", n.started.API, "--no-mdns"})
	if code != ExitFailure || !strings.Contains(errb.String(), "the local API cannot listen on "+n.started.API) {
		t.Errorf("exit %d, stderr:\n%s", code, errb.String())
	}
	if out.String() != "" {
		t.Errorf("a node that failed to start printed %q", out.String())
	}
}

func TestNodeHumanStartLine(t *testing.T) {
	var out, errb syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, NewApp(&out, &errb), []string{"meshagent", "node", "--data", t.TempDir(),
			"--listen", "/ip4/127.0.0.1/tcp/0", "--api", "off", "--no-mdns", "--log-format", "json"})
	}()
	wait.For(t, 20*time.Second, func() error {
		if !strings.Contains(out.String(), "\n") {
			return fmt.Errorf("no start line yet; stderr:\n%s", errb.String())
		}
		return nil
	})
	cancel()
	if code := <-done; code != ExitOK {
		t.Fatalf("exit %d:\n%s", code, errb.String())
	}
	f := strings.Fields(out.String())
	if len(f) != 6 || f[0] != "node" || !strings.HasPrefix(f[1], "12D3KooW") || f[2] != "addrs" ||
		!strings.Contains(f[3], "/ip4/127.0.0.1/tcp/") || f[4] != "api" || f[5] != "off" {
		t.Errorf("start line %q", out.String())
	}
	// --log-format json: every log line is a JSON object.
	for _, line := range strings.Split(strings.TrimSpace(errb.String()), "\n") {
		if !json.Valid([]byte(line)) {
			t.Errorf("log line is not JSON: %q", line)
		}
	}
}
