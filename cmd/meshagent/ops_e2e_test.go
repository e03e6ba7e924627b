//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

// meshagentEnv runs a short-lived command with extra environment
// variables.
func meshagentEnv(t *testing.T, extraEnv []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(env(t), extraEnv...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("meshagent %v: %v", args, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
}

func decodeJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
}

func TestVersion(t *testing.T) {
	var v struct {
		Version, Commit, GoVersion, Platform string
		Protocols                            map[string]string
	}
	decodeJSON(t, meshagent(t, "version", "--json").must(t, 0).stdout, &v)
	if v.Version == "" || v.GoVersion != runtime.Version() || v.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("version %+v", v)
	}
	if v.Protocols["envelope"] != "agentprotocol/0.1" || v.Protocols["hello"] != "/meshagent/hello/0.1.0" || v.Protocols["request"] != "/meshagent/request/0.1.0" {
		t.Errorf("protocols %v", v.Protocols)
	}
	text := meshagent(t, "version").must(t, 0).stdout
	for _, want := range []string{"meshagent " + v.Version, runtime.Version(), "/meshagent/request/0.1.0"} {
		if !strings.Contains(text, want) {
			t.Errorf("version output lacks %q:\n%s", want, text)
		}
	}
}

// TestOperatorCommands drives a running node with id --api, connect,
// status and log-level, as an operator would.
func TestOperatorCommands(t *testing.T) {
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[{"name": "echo", "description": "returns its params", "handler": {"builtin": "echo"}}]`)
	a := startNode(t, "alice", "--data", filepath.Join(dir, "a"), "--capabilities", caps)
	b := startNode(t, "bob", "--data", filepath.Join(dir, "b"))

	// The start line is one line: no "next steps" when stdout is no
	// terminal.
	if out := a.stdout.String(); strings.Count(out, "\n") != 1 || strings.Contains(out, "Next steps") {
		t.Errorf("node stdout is not just the start line:\n%s", out)
	}

	t.Run("id --api", func(t *testing.T) {
		var id struct {
			AgentID, PublicKey string
			Addrs              []string
		}
		decodeJSON(t, meshagent(t, "id", "--api", a.started.API, "--json").must(t, 0).stdout, &id)
		if id.AgentID != a.started.AgentID || id.PublicKey != a.started.PublicKey || !slices.Equal(id.Addrs, a.started.Addrs) {
			t.Errorf("id --api = %+v; the node started as %+v", id, a.started)
		}
		text := meshagent(t, "id", "--api", a.started.API).must(t, 0).stdout
		if !strings.Contains(text, a.started.AgentID) || !strings.Contains(text, a.started.Addrs[0]) {
			t.Errorf("id --api:\n%s", text)
		}
		meshagent(t, "id", "--api", a.started.API, "--key", filepath.Join(dir, "k")).must(t, 2)
	})

	t.Run("connect", func(t *testing.T) {
		var res struct {
			AgentID, Addr    string
			AlreadyConnected bool
		}
		decodeJSON(t, meshagent(t, "connect", a.started.Addrs[0], "--api", b.started.API, "--json").must(t, 0).stdout, &res)
		if res.AgentID != a.started.AgentID || res.Addr != a.started.Addrs[0] || res.AlreadyConnected {
			t.Fatalf("connect = %+v", res)
		}
		// Connected, the node keeps its connection and dials nothing: it
		// says so rather than report a dial of an address nobody serves.
		stale := "/ip4/127.0.0.1/tcp/1/p2p/" + a.started.AgentID
		out := meshagent(t, "connect", stale, "--api", b.started.API).must(t, 0).stdout
		if want := "already connected to " + a.started.AgentID + " (" + stale + " was not dialled)"; !strings.Contains(out, want) {
			t.Errorf("connect again printed %q, want %q", out, want)
		}
		wait.For(t, 20*time.Second, func() error {
			got, err := capabilitiesOf(t, b.started.API, a.started.AgentID)
			if err != nil || !slices.Equal(got, []string{"echo"}) {
				return fmt.Errorf("B sees A offering %v (%v)", got, err)
			}
			return nil
		})
	})

	connectErrors := []struct {
		name string
		addr string
		code int
		want string
	}{
		{"not a multiaddr", "example.com:4001", 2, "is not a multiaddr"},
		{"no peer id", "/ip4/127.0.0.1/tcp/4001", 2, "does not end in /p2p/<agent id>"},
		{"own address", b.started.Addrs[0], 2, "this node's own address"},
		{"unreachable", "/ip4/127.0.0.1/tcp/1/p2p/12D3KooWARQ5NFim5LHmaZbpLJXX4ksRtnaZsmP6MLDvP7hZfGEC", 5, "UNKNOWN_AGENT"},
	}
	for _, tc := range connectErrors {
		t.Run("connect "+tc.name, func(t *testing.T) {
			res := meshagent(t, "connect", tc.addr, "--api", b.started.API, "--timeout", "5s").must(t, tc.code)
			if !strings.Contains(res.stderr, tc.want) {
				t.Errorf("stderr %q lacks %q", res.stderr, tc.want)
			}
		})
	}

	t.Run("status", func(t *testing.T) {
		var st struct {
			AgentID, PublicKey, LogLevel string
			Addrs, Capabilities, Topics  []string
			Peers                        []peerInfo
			BusClients                   int
		}
		wait.For(t, 20*time.Second, func() error {
			decodeJSON(t, meshagent(t, "status", "--api", a.started.API, "--json").must(t, 0).stdout, &st)
			if !slices.ContainsFunc(st.Peers, func(p peerInfo) bool { return p.AgentID == b.started.AgentID && p.Connected }) {
				return fmt.Errorf("A's status lists no connected B: %+v", st.Peers)
			}
			return nil
		})
		if st.AgentID != a.started.AgentID || st.PublicKey != a.started.PublicKey || !slices.Equal(st.Addrs, a.started.Addrs) ||
			st.LogLevel != "info" || !slices.Equal(st.Capabilities, []string{"echo"}) || st.BusClients != 0 || st.Topics == nil {
			t.Errorf("status %+v", st)
		}
		text := meshagent(t, "status", "--api", a.started.API).must(t, 0).stdout
		for _, want := range []string{"agent id:", a.started.AgentID, a.started.Addrs[0], "capabilities:  echo", "1 known, 1 connected", b.started.AgentID} {
			if !strings.Contains(text, want) {
				t.Errorf("status lacks %q:\n%s", want, text)
			}
		}
	})

	t.Run("log-level", func(t *testing.T) {
		if strings.Contains(a.stderr.String(), "level=DEBUG") {
			t.Fatalf("A logged at debug before being asked to")
		}
		var lv struct{ Previous, Level string }
		decodeJSON(t, meshagent(t, "log-level", "debug", "--api", a.started.API, "--json").must(t, 0).stdout, &lv)
		if lv.Previous != "info" || lv.Level != "debug" {
			t.Fatalf("log-level debug = %+v", lv)
		}
		// A node at debug logs its API connections (and libp2p's debug).
		meshagent(t, "peers", "--api", a.started.API).must(t, 0)
		wait.For(t, 10*time.Second, func() error {
			if !strings.Contains(a.stderr.String(), "level=DEBUG") {
				return errors.New("A logs nothing at debug")
			}
			return nil
		})
		if out := meshagent(t, "log-level", "--api", a.started.API).must(t, 0).stdout; out != "log level: debug\n" {
			t.Errorf("log-level reads %q", out)
		}
		if out := meshagent(t, "log-level", "warn", "--api", a.started.API).must(t, 0).stdout; out != "log level: debug -> warn\n" {
			t.Errorf("log-level warn: %q", out)
		}
		res := meshagent(t, "log-level", "loud", "--api", a.started.API).must(t, 2)
		if !strings.Contains(res.stderr, `"loud" is not a level`) {
			t.Errorf("stderr %q", res.stderr)
		}
	})

	t.Run("no node", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		free := l.Addr().String()
		l.Close()
		for _, args := range [][]string{{"status"}, {"connect", a.started.Addrs[0]}, {"log-level"}, {"id"}} {
			res := meshagent(t, append(args, "--api", free)...).must(t, 1)
			if !strings.Contains(res.stderr, "no meshagent node is listening on "+free) {
				t.Errorf("%v: stderr %q", args, res.stderr)
			}
		}
	})
}

// TestConfigShow checks that config show reports each value and where it
// came from, with the node's precedence.
func TestConfigShow(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	writeFile(t, cfg, `{"heartbeat": "5s", "name": "from-file", "no-mdns": true}`)
	res := meshagentEnv(t, []string{"MESHAGENT_NAME=from-env", "MESHAGENT_PERSONA_TYPE=qa"},
		"config", "show", "--data", dir, "--api", "127.0.0.1:7999", "--json").must(t, 0)
	var shown struct {
		ConfigFile string
		Settings   []struct {
			Key, Source, Origin string
			Value               any
		}
	}
	decodeJSON(t, res.stdout, &shown)
	if shown.ConfigFile != cfg {
		t.Errorf("configFile %q, want %q", shown.ConfigFile, cfg)
	}
	got := map[string]string{}
	for _, s := range shown.Settings {
		got[s.Key] = fmt.Sprintf("%v|%s|%s", s.Value, s.Source, s.Origin)
	}
	want := map[string]string{
		"api":          "127.0.0.1:7999|flag|--api",
		"name":         "from-env|env|MESHAGENT_NAME",
		"persona-type": "qa|env|MESHAGENT_PERSONA_TYPE",
		"heartbeat":    "5s|file|" + cfg,
		"no-mdns":      "true|file|" + cfg,
		"data":         dir + "|flag|--data",
		"key":          filepath.Join(dir, "identity.key") + "|default|",
		"listen":       "[/ip4/0.0.0.0/tcp/4001 /ip4/0.0.0.0/udp/4001/quic-v1]|default|",
		"log-level":    "info|default|",
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("%s = %q, want %q", k, got[k], w)
		}
	}
	if fileExists(filepath.Join(dir, "identity.key")) {
		t.Error("config show created an identity")
	}
	text := meshagentEnv(t, []string{"MESHAGENT_NAME=from-env"}, "config", "show", "--data", dir).must(t, 0).stdout
	for _, w := range []string{"config file: " + cfg, "env MESHAGENT_NAME", "file " + cfg} {
		if !strings.Contains(text, w) {
			t.Errorf("config show lacks %q:\n%s", w, text)
		}
	}
	meshagent(t, "config", "shw").must(t, 2)
}

func TestCompletionAndSuggestions(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			script := meshagent(t, "completion", shell).must(t, 0).stdout
			if !strings.Contains(script, "meshagent") {
				t.Fatalf("script:\n%s", script)
			}
			if sh, err := exec.LookPath(shell); err == nil {
				path := filepath.Join(t.TempDir(), "completion")
				writeFile(t, path, script)
				if out, err := exec.Command(sh, "-n", path).CombinedOutput(); err != nil {
					t.Errorf("%s -n: %v\n%s", shell, err, out)
				}
			} else {
				t.Logf("%s not installed: syntax not checked", shell)
			}
		})
	}
	if fish := meshagent(t, "completion", "fish").stdout; !strings.Contains(fish, "log-level") || !strings.Contains(fish, "connect") {
		t.Errorf("fish completion misses commands:\n%s", fish)
	}
	meshagent(t, "completion", "tcsh").must(t, 2)

	// What the bash and zsh scripts ask the binary for.
	if out := meshagent(t, "--generate-bash-completion").must(t, 0).stdout; !slices.Contains(strings.Fields(out), "status") {
		t.Errorf("command candidates: %q", out)
	}
	if out := meshagent(t, "connect", "--ti", "--generate-bash-completion").must(t, 0).stdout; !slices.Contains(strings.Fields(out), "--timeout") {
		t.Errorf("flag candidates: %q", out)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"staus"}, `unknown command "staus" (did you mean "status"?)`},
		{[]string{"peer"}, `(did you mean "peers"?)`},
		{[]string{"peers", "--jsn"}, "(did you mean --json?)"},
		{[]string{"status", "--api", "127.0.0.1:1", "--jsno"}, "(did you mean --json?)"},
	} {
		res := meshagent(t, tc.args...).must(t, 2)
		if !strings.Contains(res.stderr, tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, res.stderr, tc.want)
		}
		if res.stdout != "" {
			t.Errorf("%v: printed %q on stdout", tc.args, res.stdout)
		}
	}
	if res := meshagent(t, "xyzzy").must(t, 2); strings.Contains(res.stderr, "did you mean") {
		t.Errorf("a far-off name got a suggestion: %q", res.stderr)
	}
}

// TestSystemdNotify runs a node as systemd would run a Type=notify
// service with WatchdogSec: it must send READY=1 once serving, WATCHDOG=1
// within every watchdog interval, and STOPPING=1 on SIGTERM.
func TestSystemdNotify(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 64)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case m := <-msgs:
			return m
		case <-time.After(20 * time.Second):
			t.Fatalf("no %s notification", what)
		}
		return ""
	}

	const watchdog = 400 * time.Millisecond
	p := startCommandEnv(t, []string{"NOTIFY_SOCKET=" + sock, fmt.Sprintf("WATCHDOG_USEC=%d", watchdog.Microseconds())},
		"node", "svc", "--data", t.TempDir())
	if m := next("READY"); m != "READY=1\nSTATUS=serving as "+p.started.AgentID {
		t.Fatalf("first notification %q, want READY=1 with a status", m)
	}
	// Three pings, each within the watchdog interval of the previous.
	last := time.Now()
	for range 3 {
		if m := next("WATCHDOG"); m != "WATCHDOG=1" {
			t.Fatalf("notification %q, want WATCHDOG=1", m)
		}
		if d := time.Since(last); d > watchdog {
			t.Errorf("a watchdog ping came %s after the previous; WatchdogSec is %s", d, watchdog)
		}
		last = time.Now()
	}
	p.signal(t, syscall.SIGTERM)
	for {
		m := next("STOPPING")
		if m == "STOPPING=1" {
			break
		}
		if m != "WATCHDOG=1" {
			t.Fatalf("notification %q while stopping", m)
		}
	}
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the node did not stop")
	}
	if p.waitErr != nil {
		t.Fatalf("exit: %v\n%s", p.waitErr, p.stderr)
	}
}

// TestSystemdUnits checks the units in contrib/systemd with
// systemd-analyze verify, pointed at the binary under test.
func TestSystemdUnits(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed; the units are not verified")
	}
	units, err := filepath.Glob("../../contrib/systemd/*.service")
	if err != nil || len(units) != 2 {
		t.Fatalf("units %v (%v); want meshagent.service and meshagent-relay.service", units, err)
	}
	dir := t.TempDir()
	for _, u := range units {
		b, err := os.ReadFile(u)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		for _, want := range []string{"Type=notify", "WatchdogSec=", "ExecStart=/usr/local/bin/meshagent "} {
			if !strings.Contains(text, want) {
				t.Errorf("%s lacks %q", u, want)
			}
		}
		// Verify against the binary under test: verify checks that
		// ExecStart's program exists.
		text = strings.ReplaceAll(text, "/usr/local/bin/meshagent", binary)
		path := filepath.Join(dir, filepath.Base(u))
		writeFile(t, path, text)
		out, err := exec.Command(analyze, "verify", "--man=no", path).CombinedOutput()
		if err != nil || len(bytes.TrimSpace(out)) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", filepath.Base(u), err, out)
		}
	}
}

// TestNextStepsOnTerminal runs a node with its stdout on a terminal (a
// pseudo-terminal from util-linux script) and checks the start line is
// followed by the next steps, with the command another node runs.
func TestNextStepsOnTerminal(t *testing.T) {
	script, err := exec.LookPath("script")
	if err != nil || runtime.GOOS != "linux" {
		t.Skip("needs util-linux script on Linux for a pseudo-terminal")
	}
	data := t.TempDir()
	args := []string{binary, "node", "--data", data, "--no-mdns", "--listen", "/ip4/127.0.0.1/tcp/0", "--api", "127.0.0.1:0"}
	cmd := exec.Command(script, "-qfec", strings.Join(args, " "), "/dev/null")
	cmd.Env = env(t)
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The node outlives a killed script: WaitDelay stops waiting for its
	// output, and the cleanup kills it too.
	cmd.WaitDelay = 5 * time.Second
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		if pid := pidWithArg(t, data); pid != 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = cmd.Process.Kill()
		<-exited
	})
	wait.For(t, 30*time.Second, func() error {
		if !strings.Contains(out.String(), "look around") {
			return fmt.Errorf("no next steps yet:\n%s", out)
		}
		return nil
	})
	text := strings.ReplaceAll(out.String(), "\r\n", "\n")
	start := strings.Index(text, "node 12D3KooW")
	steps := strings.Index(text, "Next steps:")
	if start < 0 || steps < start {
		t.Fatalf("want the start line, then the next steps:\n%s", text)
	}
	fields := strings.Fields(text[start:])
	addr := strings.Split(fields[3], ",")[0] // node <id> addrs <addr,...> api <addr>
	if want := `meshagent node --data "$(mktemp -d)" --api 127.0.0.1:0 --bootstrap ` + addr; !strings.Contains(text, want) {
		t.Errorf("next steps lack %q:\n%s", want, text)
	}
	// Stop the node itself (script's child), found by its unique --data.
	pid := 0
	wait.For(t, 10*time.Second, func() error {
		pid = pidWithArg(t, data)
		if pid == 0 {
			return errors.New("the node's process is not found")
		}
		return nil
	})
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		t.Fatal("the node did not stop on SIGTERM")
	}
}

// pidWithArg returns the process whose command line is the binary under
// test with arg among its arguments, or 0.
func pidWithArg(t *testing.T, arg string) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(string(b), "\x00")
		if len(argv) > 0 && argv[0] == binary && slices.Contains(argv, arg) {
			return pid
		}
	}
	return 0
}
