package testlog_test

import (
	"log/slog"
	"testing"

	"github.com/meshagent/meshagent/internal/testlog"
)

func TestLevels(t *testing.T) {
	for _, tc := range []struct {
		env         string
		error, info bool
	}{
		{"", true, false},
		{"off", false, false},
		{"info", true, true},
		{"ERROR", true, false},
		{"debug", true, true},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv(testlog.EnvLevel, tc.env)
			log := testlog.New(t)
			ctx := t.Context()
			if got := log.Enabled(ctx, slog.LevelError); got != tc.error {
				t.Errorf("error enabled = %v, want %v", got, tc.error)
			}
			if got := log.Enabled(ctx, slog.LevelInfo); got != tc.info {
				t.Errorf("info enabled = %v, want %v", got, tc.info)
			}
		})
	}
}

// TestAfterEnd checks that logging after the test ended (a goroutine
// still closing) neither writes to the finished test nor panics.
func TestAfterEnd(t *testing.T) {
	var log *slog.Logger
	t.Run("inner", func(t *testing.T) { log = testlog.New(t) })
	log.Error("after the end")
}
