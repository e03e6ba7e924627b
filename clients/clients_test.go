package clients_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

// python is Debian's interpreter, the one that sees python3-websockets.
const python = "/usr/bin/python3"

// scriptTimeout bounds one run of a test script or test runner.
const scriptTimeout = 2 * time.Minute

// TestPythonUnit runs the Python package's unit tests (a fake node, in
// Python) with unittest.
func TestPythonUnit(t *testing.T) {
	needPython(t)
	out := run(t, "python", python, "-m", "unittest", "discover", "-s", "tests", "-v")
	t.Logf("unittest:\n%s", out)
}

// TestJSUnit runs the JavaScript package's unit tests (a fake node, in
// JavaScript) with node's test runner.
func TestJSUnit(t *testing.T) {
	dir := jsDir(t)
	files, err := filepath.Glob(filepath.Join(dir, "test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no test/*.test.js in %s: %v", dir, err)
	}
	args := []string{"--test"}
	for _, f := range files {
		args = append(args, filepath.Join("test", filepath.Base(f)))
	}
	out := run(t, dir, "node", args...)
	t.Logf("node --test:\n%s", out)
}

// TestRealNodes starts two node processes on loopback, A serving the
// built-in echo and B bootstrapped to A, and runs each package's
// end-to-end script against their local APIs: a call with progress and
// its task status, discovery, a typed error, a topic message from B to
// A, a shared bead context patched on A and read merged on B, and a seed
// 001 bus round trip.
func TestRealNodes(t *testing.T) {
	bin := meshagent(t)
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	if err := os.WriteFile(caps, []byte(`[{"name": "echo", "description": "says it back", "handler": "echo"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	// Both keep the history of bead contexts, so a member that missed a
	// live patch catches up from the other.
	a := startNode(t, bin, "a", "--data", filepath.Join(dir, "a"), "--capabilities", caps, "--keep-history", "beadctx:*")
	b := startNode(t, bin, "b", "--data", filepath.Join(dir, "b"), "--bootstrap", a.Addrs[0], "--keep-history", "beadctx:*")
	urlA, urlB := "ws://"+a.API+"/", "ws://"+b.API+"/"

	t.Run("python", func(t *testing.T) {
		needPython(t)
		out := run(t, "python", python, filepath.Join("tests", "e2e_real_node.py"), urlA, urlB, a.AgentID)
		checkScript(t, out)
	})
	t.Run("js", func(t *testing.T) {
		js := jsDir(t)
		out := run(t, js, "node", filepath.Join("test", "e2e", "real-node.js"), urlA, urlB, a.AgentID)
		checkScript(t, out)
	})
}

func checkScript(t *testing.T, out string) {
	t.Helper()
	t.Logf("script:\n%s", out)
	for _, want := range []string{"ok: call echo", "ok: task status COMPLETED", "ok: discover echo finds node A",
		"ok: unknown capability is MeshError CAPABILITY_NOT_SUPPORTED (-32013)", "ok: subscribe on A gets B's publish",
		"ok: bus round trip", "merged on B", "ok: a non-member's patch is MeshError UNAUTHORIZED", "e2e: ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("the script did not print %q", want)
		}
	}
}

func needPython(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(python, "-c", "import websockets").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import websockets (install python3-websockets): %v %s", python, err, out)
	}
}

// run runs a command in dir to completion and returns its stdout and
// stderr, failing the test if it exits non-zero. Python writes no
// bytecode into the source tree.
func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(childEnv(t), "PYTHONDONTWRITEBYTECODE=1")
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// childEnv is the environment of every child: none of the user's
// MESHAGENT_* variables, and a home directory of the test's own.
func childEnv(t *testing.T) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "MESHAGENT_") && k != "HOME" {
			out = append(out, kv)
		}
	}
	return append(out, "HOME="+t.TempDir())
}

// jsDir returns a directory holding the JavaScript package with ws
// installed: js/ itself if js/node_modules holds ws (after a local npm
// ci), else a copy of the package in a temporary directory where npm ci
// installs the locked ws, so that the test never writes into the source
// tree. It skips the test if node, or npm when needed, is not installed; a
// failing npm ci fails it (CI reaches the npm registry).
func jsDir(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("Node.js (node) is not on PATH; the js client needs it")
	}
	if _, err := os.Stat(filepath.Join("js", "node_modules", "ws", "package.json")); err == nil {
		return "js"
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("js/node_modules is absent (run npm ci in clients/js) and npm is not on PATH to install ws")
	}
	dir := filepath.Join(t.TempDir(), "js")
	if err := os.CopyFS(dir, os.DirFS("js")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), scriptTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci (installs ws from package-lock.json): %v\n%s", err, out)
	}
	return dir
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// meshagent builds the meshagent binary once for the whole test binary.
func meshagent(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "meshagent-clients-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "meshagent")
		out, err := exec.Command(goTool(), "build", "-o", binPath, "github.com/meshagent/meshagent/cmd/meshagent").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		_ = os.RemoveAll(filepath.Dir(binPath))
	}
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

// started is a node's start line (node --json).
type started struct {
	AgentID string   `json:"agentId"`
	Addrs   []string `json:"addrs"`
	API     string   `json:"api"`
}

// lockedBuffer is a bytes.Buffer a child process writes while the test
// reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startNode starts `meshagent node` on loopback and waits for its start
// line; the node is killed when the test ends.
func startNode(t *testing.T, bin, name string, args ...string) started {
	t.Helper()
	return launch(t, bin, "node", name, args...).started
}

// nodeProc is a node (or relay) process and its start line.
type nodeProc struct {
	started
	*process
}

// launch starts `meshagent COMMAND` (node or relay) on loopback and waits
// for its start line; kill stops it with SIGKILL, and the test's end
// kills it in any case.
func launch(t *testing.T, bin, command, name string, args ...string) *nodeProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{command, "--json", "--no-mdns", "--name", name,
		"--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0", "--heartbeat", "500ms"}, args...)...)
	cmd.Env = childEnv(t)
	n := &nodeProc{process: start(t, cmd)}
	wait.For(t, 30*time.Second, func() error {
		select {
		case err := <-n.exited:
			n.exited <- err
			t.Fatalf("%s %s exited before starting: %v\n%s", command, name, err, n.errOut.String())
		default:
		}
		line, _, ok := strings.Cut(n.out.String(), "\n")
		if !ok {
			return errors.New("no start line yet")
		}
		return json.Unmarshal([]byte(line), &n.started)
	})
	return n
}
