package jsclient

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshagent/meshagent/internal/clienttest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestClient runs client.js against a node's bus: the script's message on
// outbound:42 is processed by a Go subscriber whose ack the script prints,
// and a message the Go peer sends to the script's subscription is printed
// by the script, which acknowledges it and exits.
func TestClient(t *testing.T) {
	clienttest.Run(t, clienttest.Client{
		Command: []string{"node", "client.js"},
		Dir:     scriptDir(t),
		ID:      "js-client", Topic: "inbound:js", Text: "hello from js",
	})
}

// scriptDir returns a directory where client.js runs with its
// dependencies (meshagent-client from clients/js, and its ws) installed:
// this one if node_modules holds both (after a local npm ci), else a
// temporary tree that mirrors the checkout (examples/js-client beside
// clients/js, which package.json names by relative path) where npm ci
// installs them, so that the test never writes into the source tree. It
// skips the test if node, or npm when needed, is not installed; a failing
// npm ci fails it (CI reaches the npm registry).
func scriptDir(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Skip("Node.js (node) is not on PATH; client.js needs it")
	}
	if installed("node_modules") {
		return "."
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("node_modules is absent (run npm ci here) and npm is not on PATH to install it")
	}
	root := t.TempDir()
	dir := filepath.Join(root, "examples", "js-client")
	for _, f := range []string{"client.js", "package.json", "package-lock.json", ".npmrc"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pkg := filepath.Join(root, "clients", "js")
	for _, sub := range []string{"package.json", "package-lock.json", "README.md", "src"} {
		if err := copyPath(filepath.Join("..", "..", "clients", "js", sub), filepath.Join(pkg, sub)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci (installs meshagent-client and ws from package-lock.json): %v\n%s", err, out)
	}
	return dir
}

// installed reports whether node_modules holds client.js's dependencies.
func installed(nodeModules string) bool {
	for _, f := range []string{"meshagent-client/package.json", "ws/package.json"} {
		if _, err := os.Stat(filepath.Join(nodeModules, f)); err != nil {
			return false
		}
	}
	return true
}

// copyPath copies a file, or a directory tree, from src to dst.
func copyPath(src, dst string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return os.CopyFS(dst, os.DirFS(src))
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
