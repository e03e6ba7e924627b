package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// npmDir holds the npm packages of the MCP tests (package-lock.json);
// `npm ci` there installs them.
var npmDir = filepath.Join("..", "..", "mcp", "testdata", "npm")

// needNPM skips unless node and the MCP tests' npm packages are installed.
func needNPM(t *testing.T) string {
	t.Helper()
	nodeBin, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the MCP end-to-end tests run the official TypeScript SDK")
	}
	if !fileExists(filepath.Join(npmDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")) {
		t.Skipf("the MCP tests' npm packages are not installed: run `npm ci` in %s", npmDir)
	}
	return nodeBin
}

// mcpMesh starts provider A, with exec capabilities and two tools of the
// published MCP server server-everything behind the "mcp" handler, and B,
// bootstrapped to A, whose local API the MCP server uses.
func mcpMesh(t *testing.T, nodeBin string) (a, b *nodeProc, caps string) {
	t.Helper()
	dir := t.TempDir()
	everything, err := filepath.Abs(filepath.Join(npmDir, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	if err != nil {
		t.Fatal(err)
	}
	server, _ := json.Marshal([]string{nodeBin, everything, "stdio"})
	caps = filepath.Join(dir, "caps.json")
	writeFile(t, caps, mcpCaps(string(server), ""))
	a = startNode(t, "provider", "--data", filepath.Join(dir, "a"), "--capabilities", caps, "--capabilities-poll", "0")
	b = startNode(t, "gateway", "--data", filepath.Join(dir, "b"), "--bootstrap", a.started.Addrs[0])
	wait.For(t, 30*time.Second, func() error {
		got, err := capabilitiesOf(t, b.started.API, a.started.AgentID)
		if err != nil {
			return err
		}
		if len(got) != 5 {
			return fmt.Errorf("B sees A offering %v", got)
		}
		return nil
	})
	return a, b, caps
}

func mcpCaps(server, extra string) string {
	return `[
		{"name": "bar:upper", "description": "upper-cases text",
		 "input_schema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
		 "handler": {"exec": ["sh", "-c", "tr a-z A-Z"]}},
		{"name": "fail", "handler": {"exec": ["sh", "-c", "echo broken >&2; exit 3"]}},
		{"name": "slow", "handler": {"exec": ["sh", "-c", "sleep 20; echo {}"], "timeout": "60s"}},
		{"name": "sum", "handler": {"mcp": {"command": ` + server + `, "tool": "get-sum"}}},
		{"name": "long", "handler": {"mcp": {"command": ` + server + `, "tool": "trigger-long-running-operation"}}}` + extra + `
	]`
}

type jsStep struct {
	Step         string          `json:"step"`
	Capabilities json.RawMessage `json:"capabilities"`
	SessionID    *string         `json:"sessionId"`
	Tools        json.RawMessage `json:"tools"`
	Res          json.RawMessage `json:"res"`
	Progress     []struct {
		Progress float64 `json:"progress"`
		Total    float64 `json:"total"`
	} `json:"progress"`
	Error    *string `json:"error"`
	MS       float64 `json:"ms"`
	Notified int     `json:"notified"`
}

// runJSClient runs client.mjs with args, checks each step, and changes
// A's capabilities when the client is ready for list_changed.
func runJSClient(t *testing.T, nodeBin string, a *nodeProc, caps string, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, nodeBin, append([]string{"client.mjs"}, args...)...)
	cmd.Dir = npmDir
	cmd.Env = env(t)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("client stderr:\n%s", stderr.String())
		}
	}()
	steps := map[string]jsStep{}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var s jsStep
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("client line %q: %v", sc.Text(), err)
		}
		steps[s.Step] = s
		if s.Step == "ready" {
			// A capability appears: A reloads its file on SIGHUP.
			server := strings.SplitN(strings.SplitN(readFile(t, caps), `"command": `, 2)[1], `, "tool"`, 2)[0]
			writeFile(t, caps, mcpCaps(server, `, {"name": "added", "handler": {"builtin": "echo"}}`))
			a.signal(t, syscall.SIGHUP)
			if _, err := io.WriteString(stdin, "go\n"); err != nil {
				t.Fatal(err)
			}
		}
		if s.Step == "changed" {
			break
		}
	}
	checkSteps(t, steps)
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func checkSteps(t *testing.T, steps map[string]jsStep) {
	t.Helper()
	get := func(name string) jsStep {
		s, ok := steps[name]
		if !ok {
			t.Fatalf("the client never reached step %q", name)
		}
		return s
	}
	var caps struct {
		Tools struct {
			ListChanged bool `json:"listChanged"`
		} `json:"tools"`
	}
	if json.Unmarshal(get("init").Capabilities, &caps) != nil || !caps.Tools.ListChanged {
		t.Errorf("capabilities %s: tools.listChanged missing", get("init").Capabilities)
	}
	var tools []struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		InputSchema json.RawMessage `json:"inputSchema"`
	}
	if err := json.Unmarshal(get("list").Tools, &tools); err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{}
	for _, tl := range tools {
		byName[tl.Name] = tl.Description + " " + string(tl.InputSchema)
	}
	for _, want := range []string{"bar_upper", "fail", "slow", "sum", "long"} {
		if _, ok := byName[want]; !ok {
			t.Errorf("tools/list has no %q: %v", want, byName)
		}
	}
	if !strings.Contains(byName["bar_upper"], `upper-cases text {"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`) ||
		!strings.HasPrefix(byName["fail"], "mesh capability fail ") || !strings.Contains(byName["sum"], `"a"`) {
		t.Errorf("tools: %v", byName)
	}
	type callResult struct {
		Content []struct {
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent json.RawMessage `json:"structuredContent"`
		IsError           bool            `json:"isError"`
	}
	res := func(step string) callResult {
		var r callResult
		if err := json.Unmarshal(get(step).Res, &r); err != nil {
			t.Fatalf("%s: %s: %v", step, get(step).Res, err)
		}
		return r
	}
	if r := res("call"); r.IsError || string(r.StructuredContent) != `{"TEXT":"HI"}` || len(r.Content) != 1 || r.Content[0].Text != `{"TEXT":"HI"}` {
		t.Errorf("call: %s", get("call").Res)
	}
	if s := get("refuse"); s.Error == nil && !res("refuse").IsError {
		t.Errorf("schema-violating call not refused: %s", s.Res)
	}
	if r := res("fail"); !r.IsError || len(r.Content) != 1 || !strings.HasPrefix(r.Content[0].Text, "INTERNAL_ERROR: ") || !strings.Contains(r.Content[0].Text, "broken") {
		t.Errorf("fail: %s", get("fail").Res)
	}
	if r := res("sum"); r.IsError || !strings.Contains(string(r.StructuredContent), "5") {
		t.Errorf("sum (server-everything behind the mcp handler): %s", get("sum").Res)
	}
	p := get("progress")
	if r := res("progress"); r.IsError || !strings.Contains(string(r.StructuredContent), "Long running operation completed") {
		t.Errorf("long: %s", p.Res)
	}
	// server-everything sends its third notification just before its
	// result; the Go SDK hands notifications to their handler apart from
	// responses, so that one may come after the result and be dropped.
	if len(p.Progress) < 2 || len(p.Progress) > 3 {
		t.Errorf("progress %+v, want 2 or 3 notifications", p.Progress)
	}
	for i, pr := range p.Progress {
		if pr.Progress != float64(i+1) || pr.Total != 3 {
			t.Errorf("progress %d = %+v", i, pr)
		}
	}
	if c := get("cancel"); c.Error == nil || c.MS > 15000 {
		t.Errorf("cancel: %+v", c)
	}
	if c := get("changed"); c.Error != nil || !strings.Contains(string(c.Tools), `"added"`) {
		t.Errorf("list_changed: %+v", c)
	}
}

// slowCancelled waits until A served a "slow" call that ended early: the
// MCP cancel reached the mesh task (its command sleeps 20 s).
func slowCancelled(t *testing.T, a *nodeProc) {
	t.Helper()
	cl, err := rpc.Dial(context.Background(), a.started.API)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	wait.For(t, 30*time.Second, func() error {
		var calls []protocol.CallRecord
		if err := cl.Call(context.Background(), rpc.MethodMeshRecentCalls, nil, &calls); err != nil {
			return err
		}
		for _, c := range calls {
			if c.Capability == "slow" && c.Direction == protocol.CallServed {
				if c.Outcome == "success" || c.DurationMS > 15000 {
					return fmt.Errorf("slow ran to its end: %+v", c)
				}
				return nil
			}
		}
		return errors.New("A has served no slow call yet")
	})
}

func TestMCPStdioTypeScriptSDK(t *testing.T) {
	nodeBin := needNPM(t)
	a, b, caps := mcpMesh(t, nodeBin)
	runJSClient(t, nodeBin, a, caps, "stdio", binary, b.started.API)
	slowCancelled(t, a)
}

// startMCPHTTP runs `meshagent mcp --http` on a free loopback port and
// returns its URL.
func startMCPHTTP(t *testing.T, api string) string {
	t.Helper()
	cmd := exec.Command(binary, "mcp", "--api", api, "--http", "127.0.0.1:0", "--poll", "200ms")
	cmd.Env = env(t)
	p := &nodeProc{name: "mcp", cmd: cmd, stdout: &syncBuffer{}, stderr: &syncBuffer{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.stdout, p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.waitErr = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("mcp stderr:\n%s", p.stderr)
		}
	})
	var url string
	wait.For(t, 30*time.Second, func() error {
		select {
		case <-p.exited:
			t.Fatalf("mcp exited: %v\n%s", p.waitErr, p.stderr)
		default:
		}
		line, _, ok := strings.Cut(p.stdout.String(), "\n")
		if !ok {
			return errors.New("no URL yet")
		}
		url = line
		return nil
	})
	return url
}

func TestMCPStreamableHTTPTypeScriptSDK(t *testing.T) {
	nodeBin := needNPM(t)
	a, b, caps := mcpMesh(t, nodeBin)
	url := startMCPHTTP(t, b.started.API)
	runJSClient(t, nodeBin, a, caps, "http", url)
	slowCancelled(t, a)
}

// TestMCPHTTPRebinding: a request through a loopback listener naming
// another Host, or from a page of another Origin, is refused.
func TestMCPHTTPRebinding(t *testing.T) {
	dir := t.TempDir()
	b := startNode(t, "gateway", "--data", filepath.Join(dir, "b"))
	url := startMCPHTTP(t, b.started.API)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, tc := range []struct {
		name, host, origin string
		want               int
	}{
		{"loopback", "", "", http.StatusOK},
		{"loopback origin", "", "http://localhost:5173", http.StatusOK},
		{"foreign host", "evil.example", "", http.StatusForbidden},
		{"foreign origin", "", "http://evil.example", http.StatusForbidden},
	} {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tc.host != "" {
			req.Host = tc.host
		}
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
		if tc.want == http.StatusOK && resp.Header.Get("Mcp-Session-Id") == "" {
			t.Errorf("%s: no Mcp-Session-Id", tc.name)
		}
	}
}
