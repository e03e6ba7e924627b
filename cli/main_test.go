package cli

import (
	"bytes"
	"context"
	"os"
	"strings"
	"sync"
	"testing"
)

// TestMain isolates the tests from the user's environment: no MESHAGENT_*
// variable and no ~/.meshagent config file leak in.
func TestMain(m *testing.M) {
	if os.Getenv(mcpServerEnv) == "1" {
		os.Exit(serveTestMCP())
	}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "MESHAGENT_") || k == "GOLOG_LOG_LEVEL" {
			os.Unsetenv(k)
		}
	}
	home, err := os.MkdirTemp("", "meshagent-cli-home-")
	if err != nil {
		panic(err)
	}
	os.Setenv("HOME", home)
	code := m.Run()
	os.RemoveAll(home)
	os.Exit(code)
}

// syncBuffer is a bytes.Buffer safe for a running command to write while
// the test reads it.
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

// runCLI runs the app as Main would, with stdin as input.
func runCLI(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	return runCLIContext(t, context.Background(), stdin, args...)
}

func runCLIContext(t *testing.T, ctx context.Context, stdin string, args ...string) result {
	t.Helper()
	var out, errb syncBuffer
	app := NewApp(&out, &errb)
	app.Reader = strings.NewReader(stdin)
	code := run(ctx, app, append([]string{"meshagent"}, args...))
	return result{code: code, stdout: out.String(), stderr: errb.String()}
}

func (r result) wantCode(t *testing.T, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
}

func (r result) wantStderr(t *testing.T, substrs ...string) {
	t.Helper()
	for _, s := range substrs {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr does not contain %q:\n%s", s, r.stderr)
		}
	}
}
