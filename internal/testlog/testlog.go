// Package testlog is the one logger meshagent's tests hand to the code
// they test: a *slog.Logger that writes to the test's own output, so a
// log line shows up next to the failure it explains (and only with -v or
// on failure, as go test shows test output).
//
// The level comes from the MESHAGENT_TEST_LOG environment variable
// (debug, info, warn, error, or slog's "info+2" forms); by default only
// errors are written, and "off" discards everything. The logger stops
// writing when the test ends: goroutines that outlive the test by a few
// instants (a connection draining in a Close) must not write to a
// finished test, which go test reports as a panic.
//
// It imports nothing of the project, so the tests of every package,
// including those below node, can use it.
package testlog

import (
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
)

// EnvLevel names the environment variable that sets the level.
const EnvLevel = "MESHAGENT_TEST_LOG"

// New returns a logger writing to tb's output at the level EnvLevel
// names, until tb ends.
func New(tb testing.TB) *slog.Logger {
	tb.Helper()
	level := slog.LevelError
	switch v := strings.TrimSpace(os.Getenv(EnvLevel)); strings.ToLower(v) {
	case "":
	case "off", "none":
		return slog.New(slog.DiscardHandler)
	default:
		if err := level.UnmarshalText([]byte(v)); err != nil {
			tb.Fatalf("%s: %v", EnvLevel, err)
		}
	}
	w := &writer{w: tb.Output()}
	// Registered before the caller's own cleanups, so it runs after them:
	// whatever they close may still log while closing.
	tb.Cleanup(w.stop)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level}))
}

// writer forwards to the test's output until stop.
type writer struct {
	mu   sync.Mutex
	w    io.Writer
	done bool
}

func (w *writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	return w.w.Write(p)
}

func (w *writer) stop() {
	w.mu.Lock()
	w.done = true
	w.mu.Unlock()
}
