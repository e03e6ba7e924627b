package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
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

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	subDone := make(chan result, 1)
	go func() {
		subDone <- runCLIContext(t, ctx, "", "subscribe", "news:*", "--count", "2", "--api", listenAPI)
	}()

	// Publish until the subscription has reached the speaker; then the
	// first message published must be the first one printed.
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

	var sub result
	select {
	case sub = <-subDone:
	case <-time.After(20 * time.Second):
		t.Fatal("subscribe did not exit after --count 2")
	}
	sub.wantCode(t, ExitOK)
	lines := strings.Split(strings.TrimSpace(sub.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("subscribe printed:\n%s", sub.stdout)
	}
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
		{"bad payload", []string{"publish", "news:1", "--payload", `{"a":}`}, ExitUsage, "payload are not valid JSON"},
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
}
