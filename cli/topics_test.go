package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/daemon"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// TestPublishSubscribe drives `publish` on one node and `subscribe` on
// another through their local APIs.
func TestPublishSubscribe(t *testing.T) {
	listener := meshtest.Node(t, 40, node.WithPresence(node.Presence{Interval: 0, PersonaType: "qa"}))
	speaker := meshtest.Node(t, 41, node.WithPresence(node.Presence{}))
	meshtest.Connect(t, speaker, listener)
	listenAPI, speakAPI := serveAPI(t, listener), serveAPI(t, speaker)

	t.Run("nobody subscribes", func(t *testing.T) {
		res := runCLI(t, "", "publish", "news:1", "--payload", `{"n":1}`, "--timeout", "200ms", "--api", speakAPI)
		res.wantCode(t, ExitFailure)
		res.wantStderr(t, `not published: no agent subscribes to "news:1"`, `"news" family`)
	})

	sub := startSubscribe(t, "news:*", "--count", "2", "--api", listenAPI)

	// Publish until the subscription has reached the speaker.
	var first result
	wait.For(t, 20*time.Second, func() error {
		first = runCLI(t, "", "publish", "news:1", "--payload", `{"n":1}`, "--timeout", "500ms", "--api", speakAPI, "--json")
		if first.code != ExitOK {
			return fmt.Errorf("publish exited %d: %s", first.code, first.stderr)
		}
		return nil
	})
	if strings.TrimSpace(first.stdout) != `{"topic":"news:1","peers":1}` {
		t.Errorf("publish --json printed %q", first.stdout)
	}
	// Filtered out for the listener (persona qa), then one for it.
	runCLI(t, "", "publish", "news:2", "--payload", `{"skip":true}`, "--persona", "engineer", "--api", speakAPI).wantCode(t, ExitOK)
	res := runCLI(t, `{"n":3}`, "publish", "news:3", "--payload", "-", "--persona", "qa", "--include-agent", listener.PublicKeyBase64(), "--api", speakAPI)
	res.wantCode(t, ExitOK)
	if res.stdout != "published to news:3 (1 peer)\n" {
		t.Errorf("publish printed %q", res.stdout)
	}

	res = sub.wait(t)
	res.wantCode(t, ExitOK)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 2 || !strings.HasSuffix(res.stdout, "\n") {
		t.Fatalf("subscribe printed:\n%s", res.stdout)
	}
	// GossipSub validates messages concurrently, so two messages from one
	// publisher may arrive in either order: compare as a set.
	slices.Sort(lines)
	for i, want := range []struct{ topic, payload string }{{"news:1", `{"n":1}`}, {"news:3", `{"n":3}`}} {
		var m protocol.TopicMessage
		if err := json.Unmarshal([]byte(lines[i]), &m); err != nil {
			t.Fatalf("line %q: %v", lines[i], err)
		}
		if m.Topic != want.topic || string(m.Payload) != want.payload || m.From != speaker.AgentID() || m.ID == "" || m.Time.IsZero() {
			t.Errorf("line %d: %s, want topic %s payload %s from %s", i, lines[i], want.topic, want.payload, speaker.AgentID())
		}
	}
}

// runningSubscribe is a `meshagent subscribe` running in the test.
type runningSubscribe struct {
	stdout, stderr syncBuffer
	cancel         context.CancelFunc
	done           chan int
}

// startSubscribe runs `meshagent subscribe` with args and waits until it
// has subscribed. Other commands may run only after that: urfave/cli's
// help and version flags are package globals that every run writes while
// it parses flags, so two runs must not parse at once.
func startSubscribe(t *testing.T, args ...string) *runningSubscribe {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rs := &runningSubscribe{cancel: cancel, done: make(chan int, 1)}
	app := NewApp(&rs.stdout, &rs.stderr)
	go func() { rs.done <- run(ctx, app, append([]string{"meshagent", "subscribe"}, args...)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-rs.done:
		case <-time.After(20 * time.Second):
			t.Error("subscribe did not stop")
		}
	})
	wait.For(t, 20*time.Second, func() error {
		select {
		case code := <-rs.done:
			rs.done <- code
			t.Fatalf("subscribe exited with %d before subscribing:\n%s", code, rs.stderr.String())
		default:
		}
		if !strings.Contains(rs.stderr.String(), "subscribed") {
			return fmt.Errorf("not subscribed yet; stderr:\n%s", rs.stderr.String())
		}
		return nil
	})
	return rs
}

// wait returns the command's result once it has exited on its own.
func (rs *runningSubscribe) wait(t *testing.T) result {
	t.Helper()
	select {
	case code := <-rs.done:
		rs.done <- code // for the cleanup
		return result{code: code, stdout: rs.stdout.String(), stderr: rs.stderr.String()}
	case <-time.After(20 * time.Second):
		t.Fatalf("subscribe did not exit; stdout:\n%s\nstderr:\n%s", rs.stdout.String(), rs.stderr.String())
		panic("unreachable")
	}
}

// TestSubscribeEnds checks that a cancelled subscribe (SIGINT or
// SIGTERM in Main) exits 0 having printed nothing, and that one whose
// local API goes away exits 1 saying so.
func TestSubscribeEnds(t *testing.T) {
	n := meshtest.Node(t, 43)
	t.Run("interrupted", func(t *testing.T) {
		sub := startSubscribe(t, "news:*", "--api", serveAPI(t, n))
		sub.cancel()
		res := sub.wait(t)
		res.wantCode(t, ExitOK)
		if res.stdout != "" {
			t.Errorf("stdout %q, want nothing", res.stdout)
		}
	})
	t.Run("api gone", func(t *testing.T) {
		d, err := daemon.Start(t.Context(), daemon.WithNode(n), daemon.WithAPI("127.0.0.1:0"), daemon.WithLogger(testlog.New(t)))
		if err != nil {
			t.Fatal(err)
		}
		api := d.APIAddr()
		sub := startSubscribe(t, "news:*", "--api", api)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Fatal(err)
		}
		res := sub.wait(t)
		res.wantCode(t, ExitFailure)
		res.wantStderr(t, "subscribe: lost the local API at "+api)
		if res.stdout != "" {
			t.Errorf("stdout %q, want nothing", res.stdout)
		}
	})
}

func TestTopicUsageErrors(t *testing.T) {
	api := serveAPI(t, meshtest.Node(t, 42))
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no topic", []string{"publish", "--payload", "{}"}, ExitUsage, "publish needs one TOPIC"},
		{"pattern as topic", []string{"publish", "news:*", "--payload", "{}"}, ExitUsage, "not a pattern"},
		{"no payload", []string{"publish", "news:1"}, ExitUsage, "a payload is required"},
		{"bad payload", []string{"publish", "news:1", "--payload", `{"a":}`}, ExitUsage, "invalid --payload: not valid JSON ("},
		{"payload not an object", []string{"publish", "news:1", "--payload", `[1]`}, ExitUsage, "payload must be a JSON object"},
		{"bad agent id", []string{"publish", "news:1", "--payload", "{}", "--exclude-agent", "bob"}, ExitUsage, `"bob" is not an agent id`},
		{"reserved family", []string{"publish", "presence:x", "--payload", "{}"}, ExitCodeFor(protocol.CodeInvalidMessage), "reserved for heartbeats"},
		{"no pattern", []string{"subscribe"}, ExitUsage, "subscribe needs one PATTERN"},
		{"wild family", []string{"subscribe", "*"}, ExitUsage, "must be literal"},
		{"negative count", []string{"subscribe", "a:*", "--count", "-1"}, ExitUsage, "negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runCLI(t, "", append(tc.args, "--api", api)...)
			res.wantCode(t, tc.code)
			res.wantStderr(t, tc.msg)
		})
	}

	// What a node that keeps positions refuses is said of the flag or the
	// pattern it is about.
	st := openTestStore(t, filepath.Join(t.TempDir(), "n.db"))
	durableAPI := serveStoreAPI(t, meshtest.Node(t, 43, node.WithStore(st)), st)
	for _, tc := range []struct {
		name string
		args []string
		msg  string
	}{
		{"durable name too long", []string{"subscribe", "a:*", "--durable", strings.Repeat("x", 300)}, "invalid --durable: a name of 1 to 256 bytes is required"},
		{"durable with a wild family", []string{"subscribe", "n*:x", "--durable", "d1"}, `PATTERN "n*:x": invalid pattern: "n*:x" (the family`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runCLI(t, "", append(tc.args, "--api", durableAPI)...)
			res.wantCode(t, ExitUsage)
			res.wantStderr(t, tc.msg)
		})
	}
}
