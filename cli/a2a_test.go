package cli

import (
	"path/filepath"
	"testing"
)

func TestA2AFlags(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	writeFile(t, cfg, `{"listen": ["/ip4/127.0.0.1/tcp/4001"], "api": "127.0.0.1:1"}`)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no --listen", []string{"a2a", "--config", ""}, ExitUsage, "--listen"},
		{"bad --listen", []string{"a2a", "--config", "", "--listen", "nope"}, ExitUsage, "--listen"},
		{"an argument", []string{"a2a", "--config", "", "x"}, ExitUsage, "no arguments"},
		// The config file's "listen" is the node's multiaddrs, not the
		// gateway's address: it is not applied, and its "api" is.
		{"config file's listen", []string{"a2a", "--config", cfg}, ExitUsage, "a2a needs --listen"},
		{"config file's api", []string{"a2a", "--config", cfg, "--listen", "127.0.0.1:0"}, ExitFailure, "127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, "", tc.args...)
			r.wantCode(t, tc.code)
			r.wantStderr(t, tc.stderr)
		})
	}
}
