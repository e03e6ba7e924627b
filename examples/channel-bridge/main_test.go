package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// transcript is the flow after the bus's address line: each chat's first
// message goes to the default handler, which spawns the chat's agent and
// has the bus retry; every later message goes straight to that agent,
// which counts the messages of its own chat.
var transcript = []string{
	"bridge: telegram-bridge subscribed to outbound:*",
	"spawner: default-handler is the default handler for tg:*",
	"chat 1001 -> hi",
	"bus: tg:1001 acked by default-handler (retrying: spawned agent-tg-1001)",
	`chat 1001 <- you said "hi" (message 1 in this chat)`,
	"chat 2002 -> hello there",
	"bus: tg:2002 acked by default-handler (retrying: spawned agent-tg-2002)",
	`chat 2002 <- you said "hello there" (message 1 in this chat)`,
	"chat 1001 -> how are you?",
	"bus: tg:1001 acked by agent-tg-1001 (processed: true)",
	`chat 1001 <- you said "how are you?" (message 2 in this chat)`,
	"chat 2002 -> bye",
	"bus: tg:2002 acked by agent-tg-2002 (processed: true)",
	`chat 2002 <- you said "bye" (message 2 in this chat)`,
	"chat 1001 -> thanks",
	"bus: tg:1001 acked by agent-tg-1001 (processed: true)",
	`chat 1001 <- you said "thanks" (message 3 in this chat)`,
	"spawned 2 agents; chat 1001 had 3 messages, chat 2002 2",
}

// checkTranscript compares the output line by line: the default handler
// takes exactly one message per chat, every later one goes to the chat's
// agent.
func checkTranscript(t *testing.T, got []string) {
	t.Helper()
	if strings.Join(got, "\n") != strings.Join(transcript, "\n") {
		t.Errorf("transcript differs\ngot:\n%s\n\nwant:\n%s", strings.Join(got, "\n"), strings.Join(transcript, "\n"))
	}
}

func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if !strings.HasPrefix(lines[0], "bus: in-process relay at ws://127.0.0.1:") {
		t.Errorf("first line %q does not name the bus", lines[0])
	}
	checkTranscript(t, lines[1:])
}

// stubMesh is a relay's mesh with no peers.
type stubMesh struct{}

func (stubMesh) AgentID() string            { return "12D3KooWStubRelay" }
func (stubMesh) Peers() []protocol.PeerInfo { return nil }
func (stubMesh) Call(context.Context, protocol.CallRequest) (*protocol.Response, error) {
	return nil, protocol.Errorf(protocol.CodeUnknownAgent, "no mesh here")
}

// TestRunOnRunningRelay runs the clients against a relay started apart,
// with the bus's default retry backoff (as `meshagent relay` has it), and
// checks what the relay recorded: each chat's conversation in its
// history, and no dead letters.
func TestRunOnRunningRelay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := store.Open(filepath.Join(t.TempDir(), "bus.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err := rpctest.New(t, stubMesh{}, rpctest.WithBus(bus.WithStore(st)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	err = runOn(ctx, &out, srv.URL())
	_ = srv.Close() // the server, then the bus, which writes the history still queued
	if err != nil {
		t.Fatalf("runOn: %v\n%s", err, out.String())
	}
	checkTranscript(t, strings.Split(strings.TrimRight(out.String(), "\n"), "\n"))

	for chat, n := range map[string]int{"1001": 3, "2002": 2} {
		msgs, err := st.History(ctx, store.HistoryQuery{ConversationID: chat})
		if err != nil {
			t.Fatal(err)
		}
		in, outb := 0, 0
		for _, m := range msgs {
			switch {
			case m.Topic == "tg:"+chat && m.From == "telegram-bridge":
				in++
			case m.Topic == "outbound:"+chat && m.From == "agent-tg-"+chat:
				outb++
			default:
				t.Errorf("chat %s: unexpected message in history: %s from %s", chat, m.Topic, m.From)
			}
		}
		if in != n || outb != n {
			t.Errorf("chat %s: history holds %d inbound and %d outbound messages, want %d of each", chat, in, outb, n)
		}
	}
	dead, err := st.DeadLetters(ctx, store.DLQFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) != 0 {
		t.Errorf("%d dead letters, want none: %+v", len(dead), dead)
	}
}
