package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// forwardMesh is a fake mesh with an outbox: the agent is away (its calls
// fail with UNKNOWN_AGENT) until back is set, and Forward keeps what it
// queues; full makes Forward refuse.
type forwardMesh struct {
	*fakemesh.Mesh
	mu     sync.Mutex
	queued []forwarded
	full   bool
}

type forwarded struct {
	id, to, action string
	params         json.RawMessage
}

func (m *forwardMesh) Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error) {
	if req.Action == "summarize" {
		return nil, protocol.Errorf(protocol.CodeUnknownAgent, "agent %s is not connected and has no known address", req.To)
	}
	return m.Mesh.Call(ctx, req)
}

func (m *forwardMesh) Forward(_ context.Context, id, to, action string, params json.RawMessage) (time.Time, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.full {
		return time.Time{}, errors.New("node: outbox full")
	}
	m.queued = append(m.queued, forwarded{id, to, action, params})
	return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), nil
}

// TestAgentTopicToAnAgentThatIsAway: an agent:<id> message whose agent is
// away is handed to the mesh's outbox and acknowledged as queued; a full
// outbox leaves the ack negative, saying why.
func TestAgentTopicToAnAgentThatIsAway(t *testing.T) {
	mesh := &forwardMesh{Mesh: fakemesh.New()}
	cl := dialClient(t, rpctest.Start(t, mesh, rpctest.WithBus(), rpctest.WithRPC(rpc.WithClock(rpctest.Clock))).URL)
	payload := map[string]any{"type": "summarize", "text": "while you were out"}
	var res bus.SendResult
	if err := cl.Call(ctxT(t), bus.MethodSendMessage, map[string]any{"topic": "agent:" + peerID, "payload": payload}, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Success || len(res.Acks) != 1 || !res.Acks[0].Queued || res.Acks[0].Processed || res.Acks[0].ClientID != peerID ||
		!strings.Contains(res.Acks[0].Message, "queued") || !strings.Contains(res.Acks[0].Message, "UNKNOWN_AGENT") {
		t.Fatalf("result %+v, want one queued ack", res)
	}
	mesh.mu.Lock()
	q := mesh.queued
	mesh.mu.Unlock()
	if len(q) != 1 || q[0].id != res.MessageID || q[0].to != peerID || q[0].action != "summarize" || !strings.Contains(string(q[0].params), "while you were out") {
		t.Fatalf("forwarded %+v, want the message under its id", q)
	}

	mesh.mu.Lock()
	mesh.full = true
	mesh.mu.Unlock()
	res = bus.SendResult{}
	if err := cl.Call(ctxT(t), bus.MethodSendMessage, map[string]any{"topic": "agent:" + peerID, "payload": payload}, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Acks) != 1 || res.Acks[0].Queued || !strings.Contains(res.Acks[0].Message, "not queued: node: outbox full") {
		t.Fatalf("result %+v, want a negative ack saying the outbox is full", res)
	}
}
