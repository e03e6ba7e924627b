package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/daemon"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// TestSendMessageToAnAgentThatIsAway: `send-message --topic agent:<id>`
// to an agent whose node is down is queued in the sending node's outbox
// (the ack says so, and a line on stderr), and the call reaches the agent
// once it is back.
func TestSendMessageToAnAgentThatIsAway(t *testing.T) {
	st := openTestStore(t, filepath.Join(t.TempDir(), daemon.StoreFileName))
	n := meshtest.Node(t, 60, node.WithStore(st))
	api := serveStoreAPI(t, n, st)
	var calls atomic.Int64
	summarize := func() node.Option {
		return node.WithServices(node.Service{Capability: protocol.Capability{Name: "summarize"}, Handler: handler(func(context.Context, *node.Call) (json.RawMessage, error) {
			calls.Add(1)
			return json.RawMessage(`{"summary":"ok"}`), nil
		})})
	}
	away := meshtest.Node(t, 61, summarize())
	meshtest.Connect(t, n, away)
	to := away.AgentID()
	if err := away.Close(); err != nil {
		t.Fatal(err)
	}

	res := runCLI(t, "", "send-message", "--bus", "ws://"+api+"/", "--topic", "agent:"+to, "--payload", `{"type":"summarize","text":"t"}`)
	res.wantCode(t, ExitOK)
	res.wantStderr(t, "agent "+to+" is away", "queued in the node's outbox")
	var sr bus.SendResult
	if err := json.Unmarshal([]byte(res.stdout), &sr); err != nil || len(sr.Acks) != 1 || !sr.Acks[0].Queued {
		t.Fatalf("result %s (%v), want one queued ack", res.stdout, err)
	}

	back := meshtest.Node(t, 61, summarize())
	meshtest.Connect(t, back, n)
	wait.For(t, 10*time.Second, func() error {
		if c := calls.Load(); c != 1 {
			return fmt.Errorf("summarize ran %d times", c)
		}
		return nil
	})
}

// TestMeshSendMessageQueued: mesh.sendMessage to an agent whose node is
// down answers {"queued":true}, and the direct message reaches the agent
// once it is back.
func TestMeshSendMessageQueued(t *testing.T) {
	st := openTestStore(t, filepath.Join(t.TempDir(), daemon.StoreFileName))
	n := meshtest.Node(t, 62, node.WithStore(st))
	api := serveAPI(t, n)
	away := meshtest.Node(t, 63)
	meshtest.Connect(t, n, away)
	to := away.AgentID()
	if err := away.Close(); err != nil {
		t.Fatal(err)
	}

	ctx := meshtest.Context(t, 30*time.Second)
	cl, err := dialAPI(ctx, api)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var raw json.RawMessage
	if err := cl.Call(ctx, rpc.MethodMeshSendMessage, map[string]any{"agentId": to, "message": map[string]any{"message_id": "m-away", "subject": "while you were out"}}, &raw); err != nil {
		t.Fatal(err)
	}
	if string(raw) != `{"messageId":"m-away","queued":true}` {
		t.Fatalf("mesh.sendMessage answered %s, want queued", raw)
	}

	back := meshtest.Node(t, 63)
	var got atomic.Int64
	back.OnMessage(func(_ context.Context, _ peer.ID, m protocol.AgentMessage) (json.RawMessage, error) {
		if m.MessageID == "m-away" {
			got.Add(1)
		}
		return nil, nil
	})
	meshtest.Connect(t, back, n)
	wait.For(t, 10*time.Second, func() error {
		if c := got.Load(); c != 1 {
			return fmt.Errorf("the message arrived %d times", c)
		}
		return nil
	})
}

// TestHeldMessagesWaitForTheAgent: on a node that holds direct messages
// (--hold-messages) a message sent before the agent attaches through the
// local API is refused, queued by the sender's node, and handed to the
// agent once, after it calls mesh.onMessage.
func TestHeldMessagesWaitForTheAgent(t *testing.T) {
	st := openTestStore(t, filepath.Join(t.TempDir(), daemon.StoreFileName))
	sender := meshtest.Node(t, 64, node.WithStore(st))
	agentNode := meshtest.Node(t, 65)
	agentAPI := startDaemon(t, daemon.WithNode(agentNode), func(c *daemon.Config) error { c.HoldMessages = true; return nil }).APIAddr()
	meshtest.Connect(t, sender, agentNode)
	senderAPI := serveAPI(t, sender)

	ctx := meshtest.Context(t, 30*time.Second)
	cl, err := dialAPI(ctx, senderAPI)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var raw json.RawMessage
	if err := cl.Call(ctx, rpc.MethodMeshSendMessage, map[string]any{"agentId": agentNode.AgentID(), "message": map[string]any{"message_id": "m-held", "subject": "before you attached"}}, &raw); err != nil {
		t.Fatal(err)
	}
	if string(raw) != `{"messageId":"m-held","queued":true}` {
		t.Fatalf("mesh.sendMessage answered %s, want queued", raw)
	}

	var got atomic.Int64
	agent, err := rpc.Dial(ctx, agentAPI, rpc.WithRequestHandler(func(_ context.Context, method string, params json.RawMessage) (any, error) {
		var p rpc.AgentMessageParams
		if method == rpc.MethodMeshAgentMessage && json.Unmarshal(params, &p) == nil && p.Message.MessageID == "m-held" && p.From == sender.AgentID() {
			got.Add(1)
		}
		return nil, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	if err := agent.Call(ctx, rpc.MethodMeshOnMessage, map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, func() error {
		if c := got.Load(); c != 1 {
			return fmt.Errorf("the agent got the message %d times", c)
		}
		return nil
	})
}

// TestSendMessageSeed004Direct: `send-message` with seed 004's
// agent_message as written (no --topic) reaches the mesh agent it names
// as a direct message, its from_agent_id checked against the sender, and
// a claim of another sender is a usage error that delivers nothing.
func TestSendMessageSeed004Direct(t *testing.T) {
	st := openTestStore(t, filepath.Join(t.TempDir(), daemon.StoreFileName))
	n := meshtest.Node(t, 64, node.WithStore(st))
	api := serveStoreAPI(t, n, st)
	got := make(chan protocol.AgentMessage, 4)
	to := meshtest.Node(t, 65, node.WithMessageHandler(func(_ context.Context, _ peer.ID, m protocol.AgentMessage) (json.RawMessage, error) {
		got <- m
		return json.RawMessage(`{"ack":true}`), nil
	}))
	meshtest.Connect(t, n, to)
	t.Setenv("BUB_AGENT_ID", "agent-pm-1")
	msg := `{"type":"agent_message","from_agent_id":"agent-pm-1","to_agent_id":"` + to.AgentID() + `","message_id":"msg-7","subject":"Review PR","body":"please","priority":"high","requires_response":true,"context":{"bead_id":"bd-1"},"timestamp":"2026-02-05T20:00:00Z"}`
	res := runCLI(t, "", "send-message", "--bus", "ws://"+api+"/", "--payload", msg)
	res.wantCode(t, ExitOK)
	m := wait.Receive(t, 10*time.Second, got, "the direct message")
	if m.MessageID != "msg-7" || m.Subject != "Review PR" || m.Priority != "high" || !m.RequiresResponse || string(m.Context) != `{"bead_id":"bd-1"}` {
		t.Fatalf("delivered %+v", m)
	}
	claim := strings.Replace(msg, `"from_agent_id":"agent-pm-1"`, `"from_agent_id":"agent-ceo"`, 1)
	// The bus frees the client id when it sees the first command's
	// connection close, a moment after that command exits.
	wait.For(t, 10*time.Second, func() error {
		res = runCLI(t, "", "send-message", "--bus", "ws://"+api+"/", "--payload", claim)
		if strings.Contains(res.stderr, "is in use by a live connection") {
			return errors.New(res.stderr)
		}
		return nil
	})
	res.wantCode(t, ExitUsage)
	res.wantStderr(t, "is not the sender")
	select {
	case m := <-got:
		t.Fatalf("a message claiming another sender was delivered: %+v", m)
	default:
	}
	res = runCLI(t, "", "send-message", "--bus", "ws://"+api+"/", "--payload", `{"type":"task","text":"x"}`)
	res.wantCode(t, ExitUsage)
}
