package cli

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/gologshim"
)

// TestLibp2pLogs checks libp2p's loggers write through meshagent's handler:
// errors only by default, everything at --log-level debug, and per
// subsystem as GOLOG_LOG_LEVEL says.
func TestLibp2pLogs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		level   slog.Level
		golog   string
		logger  string
		want    []string
		notWant []string
		warn    string
	}{
		{name: "quiet by default", level: slog.LevelInfo, logger: "swarm-test",
			want: []string{"msg=E1"}, notWant: []string{"W1", "I1", "D1"}},
		{name: "debug follows meshagent", level: slog.LevelDebug, logger: "swarm-test",
			want: []string{"msg=E1", "msg=W1", "msg=I1", "msg=D1"}},
		{name: "GOLOG_LOG_LEVEL per subsystem", level: slog.LevelInfo, golog: "error,ping-test=info", logger: "ping-test",
			want: []string{"msg=E1", "msg=W1", "msg=I1"}, notWant: []string{"D1"}},
		{name: "GOLOG_LOG_LEVEL fallback", level: slog.LevelDebug, golog: "error,ping-test=info", logger: "other-test",
			want: []string{"msg=E1"}, notWant: []string{"W1", "I1", "D1"}},
		{name: "GOLOG_LOG_LEVEL fallback level", level: slog.LevelInfo, golog: "warn", logger: "other-test",
			want: []string{"msg=E1", "msg=W1"}, notWant: []string{"I1", "D1"}},
		{name: "invalid GOLOG_LOG_LEVEL ignored", level: slog.LevelInfo, golog: "error,ping-test=loud", logger: "ping-test",
			want: []string{"msg=E1"}, notWant: []string{"W1", "I1", "D1"}, warn: `"loud" is not a level`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.golog != "" {
				t.Setenv("GOLOG_LOG_LEVEL", tc.golog)
			}
			var buf syncBuffer
			stop, err := routeLibp2pLogs(&buf, logSettings{level: tc.level, format: "text"})
			if tc.warn == "" && err != nil || tc.warn != "" && (err == nil || !strings.Contains(err.Error(), tc.warn)) {
				t.Errorf("routeLibp2pLogs error %v, want %q", err, tc.warn)
			}
			log := gologshim.Logger(tc.logger)
			log.Debug("D1")
			log.Info("I1")
			log.Warn("W1")
			log.Error("E1", "k", "v")
			stop()
			log.Error("after stop")
			out := buf.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("missing %q in:\n%s", w, out)
				}
			}
			for _, w := range append(tc.notWant, "after stop") {
				if strings.Contains(out, w) {
					t.Errorf("unexpected %q in:\n%s", w, out)
				}
			}
			if !strings.Contains(out, "logger="+tc.logger) {
				t.Errorf("records lack the subsystem:\n%s", out)
			}
		})
	}
}
