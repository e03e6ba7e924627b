package bus_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// forwardMesh is a fake mesh with an outbox: the agent is away (its calls
// fail with UNKNOWN_AGENT) until back is set, and Forward keeps what it
// queues; full makes Forward refuse.
type forwardMesh struct {
	*fakemesh.Mesh
	mu     sync.Mutex
	queued []forwarded
	full   bool
	// broken makes Forward fail as an outbox whose store cannot write.
	broken error
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
	if m.broken != nil {
		return time.Time{}, m.broken
	}
	m.queued = append(m.queued, forwarded{id, to, action, params})
	return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), nil
}

// TestAgentTopicToAnAgentThatIsAway: an agent:<id> message whose agent is
// away is handed to the mesh's outbox and acknowledged as queued; a full
// outbox refuses it: the ack says why and the send is no success.
func TestAgentTopicToAnAgentThatIsAway(t *testing.T) {
	mesh := &forwardMesh{Mesh: fakemesh.New()}
	cl := dialClient(t, rpctest.Start(t, mesh, rpctest.WithBus(bus.WithForwarder(mesh)), rpctest.WithRPC(rpc.WithClock(rpctest.Clock))).URL)
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
	if res.Success || len(res.Acks) != 1 || res.Acks[0].Queued || !strings.Contains(res.Acks[0].Message, "not queued: node: outbox full") {
		t.Fatalf("result %+v, want no success and a negative ack saying the outbox is full", res)
	}
}

// TestForwarderOnlyWhenGiven: a bus built without WithForwarder never
// queues, even over a mesh that could (what it can do is stated when it
// is built, not found from the mesh's type): the away agent's ack says
// why, unprocessed and not queued, and nothing reaches the outbox. A nil Forwarder is
// refused.
func TestForwarderOnlyWhenGiven(t *testing.T) {
	mesh := &forwardMesh{Mesh: fakemesh.New()}
	cl := dialClient(t, rpctest.Start(t, mesh, rpctest.WithBus(), rpctest.WithRPC(rpc.WithClock(rpctest.Clock))).URL)
	var res bus.SendResult
	if err := cl.Call(ctxT(t), bus.MethodSendMessage, map[string]any{"topic": "agent:" + peerID, "payload": map[string]any{"type": "summarize"}}, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Acks) != 1 || res.Acks[0].Queued || res.Acks[0].Processed || !strings.Contains(res.Acks[0].Message, "UNKNOWN_AGENT") {
		t.Fatalf("result %+v, want one ack saying the agent is away, not queued", res)
	}
	mesh.mu.Lock()
	defer mesh.mu.Unlock()
	if len(mesh.queued) != 0 {
		t.Fatalf("queued %+v without WithForwarder", mesh.queued)
	}
	var cfg bus.Config
	if err := cfg.Apply(bus.WithForwarder(nil)); err == nil || !strings.Contains(err.Error(), "nil Forwarder") {
		t.Fatalf("WithForwarder(nil): %v", err)
	}
}

// TestAgentTopicOutboxCannotWrite (issue 23, disk full on a node): an
// agent:<id> message to an agent that is away, whose outbox cannot write
// (store.ErrWrite: a full disk), is refused with -32005 naming the cause,
// never acknowledged; once the outbox writes again it is queued.
func TestAgentTopicOutboxCannotWrite(t *testing.T) {
	mesh := &forwardMesh{Mesh: fakemesh.New()}
	mesh.broken = fmt.Errorf("node: outbox: %w: write bus.db: no space left on device", store.ErrWrite)
	cl := dialClient(t, rpctest.Start(t, mesh, rpctest.WithBus(bus.WithForwarder(mesh)), rpctest.WithRPC(rpc.WithClock(rpctest.Clock))).URL)
	payload := map[string]any{"type": "summarize", "text": "while you were out"}
	var res bus.SendResult
	err := cl.Call(ctxT(t), bus.MethodSendMessage, map[string]any{"topic": "agent:" + peerID, "payload": payload}, &res)
	if rpcCode(err) != rpc.CodeServerBusy || !strings.Contains(err.Error(), "no space left on device") || !strings.Contains(err.Error(), "not accepted") {
		t.Fatalf("sendMessage with the outbox unable to write: %+v %v, want -32005 saying why", res, err)
	}
	if res.Success || len(res.Acks) != 0 {
		t.Fatalf("a refused message was acknowledged: %+v", res)
	}

	mesh.mu.Lock()
	mesh.broken = nil
	mesh.mu.Unlock()
	res = bus.SendResult{}
	if err := cl.Call(ctxT(t), bus.MethodSendMessage, map[string]any{"topic": "agent:" + peerID, "payload": payload}, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Success || len(res.Acks) != 1 || !res.Acks[0].Queued {
		t.Fatalf("result %+v once the outbox writes again, want one queued ack", res)
	}
}
