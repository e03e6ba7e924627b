package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// escalation stands for the node's side of one task's escalation.
type escalation struct {
	mu      sync.Mutex
	reasons []string
	decided chan protocol.TaskDecision
}

func (e *escalation) task(capability string) *rpc.Task {
	return &rpc.Task{Requester: peerID, Capability: capability, Params: json.RawMessage(`{}`), CorrelationID: "corr", ID: "task-1",
		Progress: func(json.RawMessage) error { return nil }, SetState: func(protocol.TaskState) {},
		Escalate: func(reason string) error {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.reasons = append(e.reasons, reason)
			return nil
		},
		Decision: func(ctx context.Context) (protocol.TaskDecision, error) {
			select {
			case d := <-e.decided:
				return d, nil
			case <-ctx.Done():
				return protocol.TaskDecision{}, ctx.Err()
			}
		}}
}

// TestServeEscalation: a serving client escalates with mesh.setState
// ESCALATED and a reason, learns the operator's decision as
// mesh.taskResolved and answers; another answers mesh.handle with
// -32021, leaving the answer to the decision (rpc.ErrEscalated, the
// message its reason). mesh.handle names the requester's task id.
func TestServeEscalation(t *testing.T) {
	ts, p := newServeServer(t)
	resolved := make(chan rpc.TaskResolvedParams, 1)
	handles := make(chan rpc.HandleParams, 4)
	var c *rpc.Client
	ready := make(chan struct{})
	c = dialClient(t, ts.url,
		rpc.WithRequestHandler(func(ctx context.Context, method string, params json.RawMessage) (any, error) {
			<-ready
			var hp rpc.HandleParams
			if err := json.Unmarshal(params, &hp); err != nil {
				return nil, err
			}
			handles <- hp
			if string(hp.Params) == `{"leave":true}` {
				return nil, rpc.Errorf(rpc.CodeEscalated, "a human decides")
			}
			if err := c.Notify(ctx, rpc.MethodMeshSetState, rpc.SetStateParams{TaskID: hp.TaskID, State: protocol.TaskEscalated, Reason: "over budget"}); err != nil {
				return nil, err
			}
			select {
			case r := <-resolved:
				return map[string]any{"approved": r.Approved, "reason": r.Reason, "task": r.TaskID == hp.TaskID}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}),
		rpc.WithNotificationHandler(func(method string, params json.RawMessage) {
			if method == rpc.MethodMeshTaskResolved {
				var r rpc.TaskResolvedParams
				if err := protocol.DecodeStrict(params, &r); err == nil {
					resolved <- r
				}
			}
		}))
	close(ready)
	var res rpc.ServeResult
	if err := c.Call(ctxT(t), rpc.MethodMeshServe, rpc.ServeParams{Capabilities: []json.RawMessage{json.RawMessage(summarize)}}, &res); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	h := p.h
	p.mu.Unlock()

	e := &escalation{decided: make(chan protocol.TaskDecision, 1)}
	e.decided <- protocol.TaskDecision{Approved: true, Reason: "fine"}
	out, err := h(ctxT(t), e.task("summarize"))
	if err != nil || string(out) != `{"approved":true,"reason":"fine","task":true}` {
		t.Fatalf("answer %s %v", out, err)
	}
	if hp := <-handles; hp.RequesterTaskID != "task-1" {
		t.Fatalf("mesh.handle %+v", hp)
	}
	if len(e.reasons) != 1 || e.reasons[0] != "over budget" {
		t.Fatalf("escalated with %q", e.reasons)
	}

	e = &escalation{decided: make(chan protocol.TaskDecision)}
	tk := e.task("summarize")
	tk.Params = json.RawMessage(`{"leave":true}`)
	if _, err := h(ctxT(t), tk); !errors.Is(err, rpc.ErrEscalated) {
		t.Fatalf("a client leaving the answer to the decision: %v", err)
	}
	if len(e.reasons) != 1 || e.reasons[0] != "a human decides" {
		t.Fatalf("escalated with %q", e.reasons)
	}
}
