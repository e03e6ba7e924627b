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
