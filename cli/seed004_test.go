package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// Seed 004's examples as the seed writes them.
const (
	seedDirectMessage = `{
  "type": "agent_message",
  "from_agent_id": "agent-qa-engineer-1",
  "to_agent_id": "agent-code-reviewer-2",
  "message_id": "msg-abc-123",
  "subject": "Review request for auth module",
  "body": "Can you review the authentication changes in src/auth.go?",
  "priority": "normal",
  "requires_response": true,
  "context": {
    "bead_id": "bead-xyz-789",
    "files": ["src/auth.go", "src/auth_test.go"],
    "action": "code_review"
  },
  "timestamp": "2026-02-05T20:00:00Z"
}`
	seedBroadcastMessage = `{
  "type": "broadcast",
  "from_agent_id": "agent-project-manager-1",
  "message_id": "msg-def-456",
  "subject": "Sprint planning meeting",
  "body": "Planning session starts in 5 minutes. All agents please join.",
  "filter": {
    "persona_types": ["engineer", "qa", "code-reviewer"],
    "exclude_agents": ["agent-housekeeping-bot-1"]
  },
  "timestamp": "2026-02-05T20:00:00Z"
}`
	seedNotificationMessage = `{
  "type": "notification",
  "from_agent_id": "agent-code-reviewer-1",
  "broadcast": true,
  "message_id": "notif-mno-345",
  "notification_type": "bead_completed",
  "payload": {
    "bead_id": "bead-abc-123",
    "result": "approved",
    "pr_number": 456
  },
  "timestamp": "2026-02-05T20:00:00Z"
}`
)

// withIDs puts real agent ids where seed 004's examples have made-up
// names: from_agent_id must be the sending agent, and to_agent_id an
// agent id. Every other member is as the seed writes it.
func withIDs(example, from, to string) json.RawMessage {
	for _, name := range []string{"agent-qa-engineer-1", "agent-project-manager-1", "agent-code-reviewer-1"} {
		example = strings.Replace(example, `"from_agent_id": "`+name+`"`, `"from_agent_id": "`+from+`"`, 1)
	}
	return json.RawMessage(strings.Replace(example, `"agent-code-reviewer-2"`, `"`+to+`"`, 1))
}

// TestSeed004ShapesOnTheLocalAPI: mesh.sendMessage takes seed 004's
// direct message, broadcast and notification as written, answers in the
// seed's member names, and refuses a from_agent_id that is not the
// sending agent.
func TestSeed004ShapesOnTheLocalAPI(t *testing.T) {
	sender := meshtest.Node(t, 70)
	receiver := meshtest.Node(t, 71, node.WithPresence(node.Presence{Interval: node.MinHeartbeatInterval, PersonaType: "qa"}))
	meshtest.Connect(t, sender, receiver)
	var (
		mu   sync.Mutex
		got  []protocol.AgentMessage
		from []peer.ID
	)
	receiver.OnMessage(func(_ context.Context, f peer.ID, m protocol.AgentMessage) (json.RawMessage, error) {
		mu.Lock()
		defer mu.Unlock()
		got, from = append(got, m), append(from, f)
		return json.RawMessage(`{"review":"started"}`), nil
	})
	topicMsgs := make(chan protocol.TopicMessage, 8)
	cancel, err := receiver.Subscribe(rpc.SeedBroadcastTopic, func(m protocol.TopicMessage) { topicMsgs <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()

	ctx := meshtest.Context(t, 60*time.Second)
	cl, err := dialAPI(ctx, serveAPI(t, sender))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	t.Run("direct message", func(t *testing.T) {
		var out map[string]any
		if err := cl.Call(ctx, rpc.MethodMeshSendMessage, withIDs(seedDirectMessage, sender.AgentID(), receiver.AgentID()), &out); err != nil {
			t.Fatal(err)
		}
		if out["type"] != "agent_message" || out["message_id"] != "msg-abc-123" || out["status"] != "delivered" || out["to_agent_id"] != receiver.AgentID() || out["delivered_at"] == nil {
			t.Errorf("answer %v", out)
		}
		if r, _ := json.Marshal(out["response"]); string(r) != `{"review":"started"}` {
			t.Errorf("response %s", r)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 1 || from[0] != sender.ID() {
			t.Fatalf("received %v from %v", got, from)
		}
		m := got[0]
		if m.MessageID != "msg-abc-123" || m.Subject != "Review request for auth module" || m.Priority != "normal" || !m.RequiresResponse ||
			!strings.Contains(string(m.Context), `"bead_id":"bead-xyz-789"`) {
			t.Errorf("received %+v (context %s)", m, m.Context)
		}
	})
	t.Run("the public key form of the ids", func(t *testing.T) {
		msg := strings.Replace(seedDirectMessage, "msg-abc-123", "msg-abc-124", 1)
		var out rpc.SeedSendResult
		if err := cl.Call(ctx, rpc.MethodMeshSendMessage, withIDs(msg, sender.PublicKeyBase64(), receiver.PublicKeyBase64()), &out); err != nil {
			t.Fatal(err)
		}
		if out.Status != "delivered" || out.ToAgentID != receiver.AgentID() {
			t.Errorf("answer %+v", out)
		}
	})
	for _, tc := range []struct {
		name, params, want string
	}{
		{"a sender that is another agent", string(withIDs(seedDirectMessage, receiver.AgentID(), receiver.AgentID())), `"from_agent_id"`},
		{"the seed's made-up sender, verbatim", strings.Replace(seedDirectMessage, "agent-code-reviewer-2", receiver.AgentID(), 1), `"from_agent_id" "agent-qa-engineer-1" is not this agent`},
		{"a broadcast from another agent", seedBroadcastMessage, `"from_agent_id"`},
		{"no recipient", `{"type":"agent_message","subject":"s"}`, `"to_agent_id" is required`},
		{"an unknown member", `{"type":"agent_message","to_agent_id":"` + receiver.AgentID() + `","subject":"s","cc":"x"}`, `unknown field "cc"`},
		{"a wrong type", `{"type":"agent_message","to_agent_id":"` + receiver.AgentID() + `","subject":"s","requires_response":"yes"}`, `"requires_response" must be`},
		{"an unknown type", `{"type":"telegram","to_agent_id":"x"}`, `"type" must be`},
		{"a notification to one agent", `{"type":"notification","notification_type":"bead_blocked","broadcast":false}`, `"broadcast": true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := cl.Call(ctx, rpc.MethodMeshSendMessage, json.RawMessage(tc.params), nil)
			var re *rpc.Error
			if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, tc.want) {
				t.Fatalf("got %v, want -32602 mentioning %s", err, tc.want)
			}
		})
	}
	mu.Lock()
	if len(got) != 2 {
		t.Errorf("%d messages reached the receiver, want the 2 accepted", len(got))
	}
	mu.Unlock()

	publish := func(t *testing.T, params json.RawMessage, typ, id string) protocol.TopicMessage {
		t.Helper()
		var out rpc.SeedSendResult
		wait.For(t, 30*time.Second, func() error {
			// Until GossipSub has the receiver in the topic's mesh.
			return cl.Call(ctx, rpc.MethodMeshSendMessage, params, &out)
		})
		if out.Type != typ || out.MessageID != id || out.Status != "published" || out.Peers == nil || *out.Peers < 1 {
			t.Errorf("answer %+v", out)
		}
		for {
			m := wait.Receive(t, 30*time.Second, topicMsgs, "the "+typ+" on "+rpc.SeedBroadcastTopic)
			if strings.Contains(string(m.Payload), id) {
				return m
			}
		}
	}
	t.Run("broadcast", func(t *testing.T) {
		m := publish(t, withIDs(seedBroadcastMessage, sender.AgentID(), ""), "broadcast", "msg-def-456")
		var b rpc.SeedBroadcast
		if err := json.Unmarshal(m.Payload, &b); err != nil || b.Type != "broadcast" || b.FromAgentID != sender.AgentID() || b.Subject != "Sprint planning meeting" {
			t.Errorf("received %s (%v)", m.Payload, err)
		}
	})
	t.Run("notification", func(t *testing.T) {
		m := publish(t, withIDs(seedNotificationMessage, sender.AgentID(), ""), "notification", "notif-mno-345")
		var nt rpc.SeedNotification
		if err := json.Unmarshal(m.Payload, &nt); err != nil || nt.NotificationType != "bead_completed" || nt.FromAgentID != sender.AgentID() || !strings.Contains(string(nt.Payload), `"pr_number":456`) {
			t.Errorf("received %s (%v)", m.Payload, err)
		}
	})
}
