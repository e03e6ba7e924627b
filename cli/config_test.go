package cli

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/node"
)

// resolveNodeFlags runs `meshagent node args…` with the node replaced by
// flag resolution, and returns the settings it resolved.
func resolveNodeFlags(t *testing.T, args ...string) (*nodeSettings, result) {
	t.Helper()
	var out, errb syncBuffer
	app, r := newApp(&out, &errb)
	var got *nodeSettings
	app.Command("node").Action = func(c *ucli.Context) error {
		s, err := r.resolveNode(c)
		got = s
		return err
	}
	code := run(context.Background(), app, append([]string{"meshagent", "node"}, args...))
	return got, result{code: code, stdout: out.String(), stderr: errb.String()}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func addrStrings(s *nodeSettings) []string {
	var out []string
	for _, m := range s.listen {
		out = append(out, m.String())
	}
	return out
}

// TestConfigPrecedence checks flags > environment > config file > defaults
// for string, list, bool and duration flags, and how the file is found.
func TestConfigPrecedence(t *testing.T) {
	const fileConf = `{"api": "127.0.0.1:7001", "listen": ["/ip4/127.0.0.1/tcp/7101"], "no-mdns": true,
		"shutdown-timeout": "3s", "name": "from-file", "key": "file.key"}`
	const otherConf = `{"api": "127.0.0.1:7009", "name": "other-file"}`

	type want struct {
		api      string
		listen   []string
		mdns     bool
		shutdown time.Duration
		name     string
		key      string // relative to the data dir unless absolute
	}
	defaults := want{api: "127.0.0.1:7892", mdns: true, shutdown: 10 * time.Second, key: "identity.key"}
	fromFile := want{api: "127.0.0.1:7001", listen: []string{"/ip4/127.0.0.1/tcp/7101"}, shutdown: 3 * time.Second, name: "from-file", key: "file.key"}

	for _, tc := range []struct {
		name    string
		conf    string            // DIR/config.json, if set
		other   string            // DIR/other.json, if set
		env     map[string]string // values may use {dir}
		args    []string          // may use {dir}
		want    want
		noDirFl bool // do not pass --data (MESHAGENT_DATA sets it)
	}{
		{name: "defaults", want: defaults},
		{name: "file", conf: fileConf, want: fromFile},
		{
			name: "env beats file",
			conf: fileConf,
			env: map[string]string{
				"MESHAGENT_API":       "127.0.0.1:7002",
				"MESHAGENT_LISTEN":    "/ip4/127.0.0.1/tcp/7102,/ip4/127.0.0.1/udp/7102/quic-v1",
				"MESHAGENT_NO_MDNS":   "false",
				"MESHAGENT_NAME":      "from-env",
				"MESHAGENT_KEY":       "{dir}/env.key",
				"MESHAGENT_LOG_LEVEL": "debug",
			},
			want: want{api: "127.0.0.1:7002", listen: []string{"/ip4/127.0.0.1/tcp/7102", "/ip4/127.0.0.1/udp/7102/quic-v1"},
				mdns: true, shutdown: 3 * time.Second, name: "from-env", key: "env.key"},
		},
		{
			name: "flags beat env and file",
			conf: fileConf,
			env:  map[string]string{"MESHAGENT_API": "127.0.0.1:7002", "MESHAGENT_LISTEN": "/ip4/127.0.0.1/tcp/7102", "MESHAGENT_SHUTDOWN_TIMEOUT": "4s"},
			args: []string{"--api", "127.0.0.1:7003", "--listen", "/ip4/127.0.0.1/tcp/7103", "--listen", "/ip4/127.0.0.1/tcp/7104",
				"--no-mdns=false", "--shutdown-timeout", "5s", "--name", "from-flag", "--key", "{dir}/flag.key"},
			want: want{api: "127.0.0.1:7003", listen: []string{"/ip4/127.0.0.1/tcp/7103", "/ip4/127.0.0.1/tcp/7104"},
				mdns: true, shutdown: 5 * time.Second, name: "from-flag", key: "flag.key"},
		},
		{
			name: "env empty string beats file",
			conf: fileConf,
			env:  map[string]string{"MESHAGENT_NAME": "", "MESHAGENT_API": "off"},
			want: want{api: "", listen: fromFile.listen, shutdown: 3 * time.Second, name: "", key: "file.key"},
		},
		{
			name:  "--config names another file",
			conf:  fileConf,
			other: otherConf,
			args:  []string{"--config", "{dir}/other.json"},
			want:  want{api: "127.0.0.1:7009", mdns: true, shutdown: 10 * time.Second, name: "other-file", key: "identity.key"},
		},
		{
			name:  "MESHAGENT_CONFIG names another file",
			conf:  fileConf,
			other: otherConf,
			env:   map[string]string{"MESHAGENT_CONFIG": "{dir}/other.json"},
			want:  want{api: "127.0.0.1:7009", mdns: true, shutdown: 10 * time.Second, name: "other-file", key: "identity.key"},
		},
		{
			name: "--config empty disables the default file",
			conf: fileConf,
			args: []string{"--config", ""},
			want: defaults,
		},
		{
			name:    "MESHAGENT_DATA locates the file",
			conf:    fileConf,
			env:     map[string]string{"MESHAGENT_DATA": "{dir}"},
			noDirFl: true,
			want:    fromFile,
		},
		{
			name: "flags after a flag-less command still parse",
			conf: fileConf,
			args: []string{"--name=eq-form"},
			want: want{api: fromFile.api, listen: fromFile.listen, shutdown: fromFile.shutdown, name: "eq-form", key: "file.key"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			sub := func(s string) string { return strings.ReplaceAll(s, "{dir}", dir) }
			if tc.conf != "" {
				writeFile(t, filepath.Join(dir, "config.json"), tc.conf)
			}
			if tc.other != "" {
				writeFile(t, filepath.Join(dir, "other.json"), tc.other)
			}
			for k, v := range tc.env {
				t.Setenv(k, sub(v))
			}
			var args []string
			if !tc.noDirFl {
				args = append(args, "--data", dir)
			}
			for _, a := range tc.args {
				args = append(args, sub(a))
			}
			s, res := resolveNodeFlags(t, args...)
			res.wantCode(t, ExitOK)
			wantKey := tc.want.key
			if !filepath.IsAbs(wantKey) {
				wantKey = filepath.Join(dir, wantKey)
			}
			// (a relative path in the file is relative to the file's directory)
			got := want{api: s.cfg.API, listen: addrStrings(s), mdns: s.mdns, shutdown: s.shutdownTimeout, name: s.name, key: s.keyPath}
			tc.want.key = wantKey
			if got.api != tc.want.api || !slices.Equal(got.listen, tc.want.listen) || got.mdns != tc.want.mdns ||
				got.shutdown != tc.want.shutdown || got.name != tc.want.name || got.key != tc.want.key {
				t.Errorf("resolved\n  %+v\nwant\n  %+v", got, tc.want)
			}
		})
	}
}

// TestFlagValidation checks that every invalid value is a usage error that
// names the flag and where its value came from.
func TestFlagValidation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conf  string
		files map[string]string // beside the config file
		env   map[string]string
		args  []string
		msgs  []string
	}{
		{name: "bad listen flag", args: []string{"--listen", "/ip4/nope/tcp/1"}, msgs: []string{"invalid --listen:", `"/ip4/nope/tcp/1" is not a multiaddr`}},
		{name: "bad listen env", env: map[string]string{"MESHAGENT_LISTEN": "tcp://x"}, msgs: []string{"invalid --listen (from MESHAGENT_LISTEN)"}},
		{name: "bad listen in file", conf: `{"listen": ["nope"]}`, msgs: []string{`invalid --listen (from key "listen" in`, "config.json"}},
		{name: "bootstrap without peer id", args: []string{"--bootstrap", "/ip4/127.0.0.1/tcp/4001"}, msgs: []string{"invalid --bootstrap", "does not end in /p2p/<agent id>"}},
		{name: "mailbox without peer id", args: []string{"--mailbox", "/ip4/127.0.0.1/tcp/4001"}, msgs: []string{"invalid --mailbox", "does not end in /p2p/<agent id>"}},
		{name: "too many mailboxes", env: map[string]string{"MESHAGENT_MAILBOX": strings.Repeat("/ip4/127.0.0.1/tcp/4001/p2p/12D3KooWQYhTNQdmr3ArTeUHRYzFg94BKyTkoWBDWez9kSCVe2Xo,", 5)}, msgs: []string{"invalid --mailbox (from MESHAGENT_MAILBOX)", "the limit is 4"}},
		{name: "public api refused", args: []string{"--api", "0.0.0.0:7892"}, msgs: []string{"invalid --api", "not a loopback address", "--api-public"}},
		{name: "empty api host refused", args: []string{"--api", ":7892"}, msgs: []string{"not a loopback address"}},
		{name: "api not host:port", args: []string{"--api", "localhost"}, msgs: []string{"invalid --api", "is not host:port"}},
		{name: "api port out of range", args: []string{"--api", "127.0.0.1:70000"}, msgs: []string{"port out of range"}},
		{name: "negative shutdown timeout", args: []string{"--shutdown-timeout", "-1s"}, msgs: []string{"invalid --shutdown-timeout", "not a positive duration"}},
		{name: "shutdown timeout not a duration", env: map[string]string{"MESHAGENT_SHUTDOWN_TIMEOUT": "soon"}, msgs: []string{"MESHAGENT_SHUTDOWN_TIMEOUT"}},
		{name: "bad log level", args: []string{"--log-level", "loud"}, msgs: []string{"invalid --log-level", "debug, info, warn or error"}},
		{name: "bad log format", env: map[string]string{"MESHAGENT_LOG_FORMAT": "xml"}, msgs: []string{"invalid --log-format (from MESHAGENT_LOG_FORMAT)"}},
		{name: "missing capabilities file", args: []string{"--capabilities", "/nonexistent/caps.json"}, msgs: []string{"invalid --capabilities", "caps.json"}},
		{name: "bad bool env", env: map[string]string{"MESHAGENT_NO_MDNS": "maybe"}, msgs: []string{"MESHAGENT_NO_MDNS"}},
		{name: "unknown file key", conf: `{"apii": "x"}`, msgs: []string{`unknown key "apii"`, "api"}},
		{name: "file cannot name a file", conf: `{"config": "x.json"}`, msgs: []string{"cannot name another"}},
		{name: "wrong type in file", conf: `{"no-mdns": "yes"}`, msgs: []string{`key "no-mdns": must be true or false`}},
		{name: "number as duration in file", conf: `{"shutdown-timeout": 5}`, msgs: []string{`must be a duration string`}},
		{name: "days as duration in file", conf: `{"heartbeat": "7d"}`, msgs: []string{`key "heartbeat": time: unknown unit "d" in duration "7d" (units: ns, us, ms, s, m, h; a day is 24h)`}},
		{name: "file not an object", conf: `["api"]`, msgs: []string{"must be a JSON object"}},
		{name: "explicit config missing", args: []string{"--config", "/nonexistent/meshagent.json"}, msgs: []string{"invalid --config", "/nonexistent/meshagent.json"}},
		{name: "keep-history pattern with a wild family", args: []string{"--keep-history", "n*:x"}, msgs: []string{"invalid --keep-history", "must be literal"}},
		{name: "keep-history bytes not a number", args: []string{"--keep-history-bytes", "lots"}, msgs: []string{"invalid --keep-history-bytes", "positive number of bytes"}},
		{name: "outbox ttl not positive", args: []string{"--outbox-ttl", "0s"}, msgs: []string{"invalid --outbox-ttl", "not a positive duration"}},
		{name: "outbox ttl not a duration", env: map[string]string{"MESHAGENT_OUTBOX_TTL": "a week"}, msgs: []string{"MESHAGENT_OUTBOX_TTL"}},
		{name: "requester rate not a number", args: []string{"--requester-rate", "fast"}, msgs: []string{"invalid --requester-rate", "requests per second"}},
		{name: "requester rate negative", env: map[string]string{"MESHAGENT_REQUESTER_RATE": "-5"}, msgs: []string{"invalid --requester-rate (from MESHAGENT_REQUESTER_RATE)"}},
		{name: "requester burst zero", args: []string{"--requester-burst", "0"}, msgs: []string{"invalid --requester-burst", "positive number"}},
		{name: "requester rate object in file", conf: `{"requester-rate": {}}`, msgs: []string{`key "requester-rate": must be a string`}},
		{name: "agent rate zero", args: []string{"--agent-rate", "0"}, msgs: []string{"invalid --agent-rate", "requests per minute"}},
		{name: "agent tokens missing", args: []string{"--agent-tokens", "/nonexistent/agents.json"}, msgs: []string{"invalid --agent-tokens", "agents.json"}},
		{name: "agent tokens malformed", conf: `{"agent-tokens": "agents.json"}`, files: map[string]string{"agents.json": `{"tokens":[{"name":"a","token":"short"}]}`}, msgs: []string{"invalid --agent-tokens", "16 to 512 bytes"}},
		{name: "agent tokens without the api", args: []string{"--api", "off", "--agent-tokens", "/x.json"}, msgs: []string{"invalid --agent-tokens", "give --api too"}},
		{name: "keep-history age not positive", args: []string{"--keep-history-age", "0s"}, msgs: []string{"invalid --keep-history-age", "not positive"}},
		{name: "unexpected argument", args: []string{"extra"}, msgs: []string{`unexpected argument "extra"`}},
		{name: "unknown flag", args: []string{"--nope"}, msgs: []string{"flag provided but not defined", "meshagent node --help"}},
		{name: "unknown trailing flag", args: []string{"--name", "x", "arg", "--nope"}, msgs: []string{"flag provided but not defined: --nope"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.conf != "" {
				writeFile(t, filepath.Join(dir, "config.json"), tc.conf)
			}
			for name, content := range tc.files {
				writeFile(t, filepath.Join(dir, name), content)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			_, res := resolveNodeFlags(t, append([]string{"--data", dir}, tc.args...)...)
			res.wantCode(t, ExitUsage)
			res.wantStderr(t, tc.msgs...)
		})
	}

	t.Run("keep-history", func(t *testing.T) {
		s, res := resolveNodeFlags(t, "--data", t.TempDir(), "--keep-history", "news:*", "--keep-history", "off", "--keep-history-age", "1h", "--keep-history-bytes", "1000")
		res.wantCode(t, ExitOK)
		if strings.Join(s.keepHistory, ",") != "news:*" || s.cfg.KeepAge != time.Hour || s.cfg.KeepBytes != 1000 {
			t.Errorf("keep %v for %s within %d bytes", s.keepHistory, s.cfg.KeepAge, s.cfg.KeepBytes)
		}
	})

	t.Run("requester rate", func(t *testing.T) {
		s, res := resolveNodeFlags(t, "--data", t.TempDir())
		res.wantCode(t, ExitOK)
		if s.limits.RequestsPerSecond != node.DefaultRequestsPerSecond || s.limits.Burst != node.DefaultRequestBurst {
			t.Errorf("default rate %g burst %d", s.limits.RequestsPerSecond, s.limits.Burst)
		}
		s, res = resolveNodeFlags(t, "--data", t.TempDir(), "--requester-rate", "50", "--requester-burst", "70")
		res.wantCode(t, ExitOK)
		if s.limits.RequestsPerSecond != 50 || s.limits.Burst != 70 {
			t.Errorf("flags: rate %g burst %d", s.limits.RequestsPerSecond, s.limits.Burst)
		}
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "config.json"), `{"requester-rate": 0, "requester-burst": "9"}`)
		s, res = resolveNodeFlags(t, "--data", dir)
		res.wantCode(t, ExitOK)
		if s.limits.RequestsPerSecond != 0 || s.limits.Burst != 9 {
			t.Errorf("config file: rate %g burst %d", s.limits.RequestsPerSecond, s.limits.Burst)
		}
		t.Setenv("MESHAGENT_REQUESTER_RATE", "300")
		s, res = resolveNodeFlags(t, "--data", dir)
		res.wantCode(t, ExitOK)
		if s.limits.RequestsPerSecond != 300 {
			t.Errorf("environment: rate %g", s.limits.RequestsPerSecond)
		}
	})

	t.Run("agent tokens and rate", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "agents.json"), `{"tokens":[{"name":"claude-3","token":"claude-token-0123456789"}]}`)
		writeFile(t, filepath.Join(dir, "config.json"), `{"agent-tokens": "agents.json", "agent-rate": 5}`)
		s, res := resolveNodeFlags(t, "--data", dir)
		res.wantCode(t, ExitOK)
		if s.cfg.AgentTokens == nil || s.cfg.AgentTokens.Len() != 1 || s.cfg.AgentRate != 5 || s.cfg.AgentTokensFile != filepath.Join(dir, "agents.json") {
			t.Errorf("tokens %v from %q, rate %d", s.cfg.AgentTokens, s.cfg.AgentTokensFile, s.cfg.AgentRate)
		}
		s, res = resolveNodeFlags(t, "--data", t.TempDir())
		res.wantCode(t, ExitOK)
		if s.cfg.AgentTokens != nil || s.cfg.AgentRate != 60 {
			t.Errorf("defaults: tokens %v rate %d", s.cfg.AgentTokens, s.cfg.AgentRate)
		}
	})

	t.Run("public api allowed with --api-public", func(t *testing.T) {
		s, res := resolveNodeFlags(t, "--data", t.TempDir(), "--api", "0.0.0.0:7892", "--api-public")
		res.wantCode(t, ExitOK)
		if s.cfg.API != "0.0.0.0:7892" {
			t.Errorf("api = %q", s.cfg.API)
		}
	})
	t.Run("api off", func(t *testing.T) {
		for _, v := range []string{"off", "OFF", ""} {
			s, res := resolveNodeFlags(t, "--data", t.TempDir(), "--api", v)
			res.wantCode(t, ExitOK)
			if s.cfg.API != "" {
				t.Errorf("--api %q: api = %q, want off", v, s.cfg.API)
			}
		}
	})
}

// TestOutboxTTLFlag: --outbox-ttl comes from the flag, the environment or
// the config file, and defaults to the node's message TTL.
func TestOutboxTTLFlag(t *testing.T) {
	for _, tc := range []struct {
		name string
		conf string
		env  map[string]string
		args []string
		want time.Duration
	}{
		{name: "default", want: node.DefaultMessageTTL},
		{name: "file", conf: `{"outbox-ttl": "2m"}`, want: 2 * time.Minute},
		{name: "env beats file", conf: `{"outbox-ttl": "2m"}`, env: map[string]string{"MESHAGENT_OUTBOX_TTL": "3s"}, want: 3 * time.Second},
		{name: "flag beats env", env: map[string]string{"MESHAGENT_OUTBOX_TTL": "3s"}, args: []string{"--outbox-ttl", "1h"}, want: time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.conf != "" {
				writeFile(t, filepath.Join(dir, "config.json"), tc.conf)
			}
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			s, res := resolveNodeFlags(t, append([]string{"--data", dir}, tc.args...)...)
			res.wantCode(t, ExitOK)
			if s.outboxTTL != tc.want {
				t.Fatalf("outbox TTL %s, want %s", s.outboxTTL, tc.want)
			}
		})
	}
}
