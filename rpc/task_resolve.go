package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/meshagent/meshagent/protocol"
)

// Escalation methods. Their JSON shapes:
//
//	mesh.taskResolve  {"taskId","approve":bool,"reason"?} → the task
//	    (protocol.Task) as it stands after the decision; the operator's
//	    decision on a task this node serves that is ESCALATED. Any other
//	    state is -32010 (INVALID_MESSAGE). Served by package localapi
//	    (localapi.RegisterOperator), on a node's local API only.
//	mesh.taskEvents   {} → {"subscription"}; then mesh.taskEvent
//	    notifications {"subscription","change":{"event","taskId",
//	    "requestId"?,"requester","capability","state","reason"?,"at"}}
//	    for every task this node serves: seed 003's request.submitted,
//	    request.approved, request.rejected and request.escalated, and
//	    request.completed, request.failed, request.cancelled.
//	    mesh.unsubscribe ends it; it counts against
//	    MaxMeshSubscriptions. Served with a Control only, through
//	    Control.SubscribeTaskEvents.
//	mesh.taskResolved (to a serving client) {"taskId","approved","reason"?}
//	    the decision on a task the client escalated (mesh.setState
//	    ESCALATED) while it still handles it; taskId is mesh.handle's.
const (
	MethodMeshTaskResolve  = "mesh.taskResolve"
	MethodMeshTaskEvents   = "mesh.taskEvents"
	MethodMeshTaskEvent    = "mesh.taskEvent"
	MethodMeshTaskResolved = "mesh.taskResolved"
)

// TaskResolveParams are the params of mesh.taskResolve. Approve is
// required.
type TaskResolveParams struct {
	TaskID  string `json:"taskId"`
	Approve *bool  `json:"approve"`
	Reason  string `json:"reason,omitempty"`
}

// TaskEventParams are the params of mesh.taskEvent.
type TaskEventParams struct {
	Subscription string              `json:"subscription"`
	Change       protocol.TaskChange `json:"change"`
}

// TaskResolvedParams are the params of mesh.taskResolved.
type TaskResolvedParams struct {
	TaskID   string `json:"taskId"`
	Approved bool   `json:"approved"`
	Reason   string `json:"reason,omitempty"`
}

// ErrEscalated is what a TaskHandler returns when its serving client
// answered mesh.handle with CodeEscalated: the task is escalated, and the
// operator's decision is its answer.
var ErrEscalated = errors.New("rpc: the serving client escalated the task; its operator's decision is the answer")

const taskResolveShape = `{"taskId","approve":bool,"reason"?}`

// ParseTaskResolveParams reads mesh.taskResolve's params strictly: an
// object with a non-empty "taskId", a boolean "approve" and an optional
// string "reason" of at most protocol.MaxDecisionReason bytes; anything
// else is -32602.
func ParseTaskResolveParams(raw json.RawMessage) (TaskResolveParams, error) {
	var p TaskResolveParams
	if len(raw) == 0 || raw[0] != '{' {
		return p, Errorf(CodeInvalidParams, "invalid params: %s takes %s", MethodMeshTaskResolve, taskResolveShape)
	}
	if err := protocol.DecodeStrict(raw, &p); err != nil {
		return p, Errorf(CodeInvalidParams, "invalid params: %s: %v (it takes %s)", MethodMeshTaskResolve, err, taskResolveShape)
	}
	switch {
	case p.TaskID == "":
		return p, Errorf(CodeInvalidParams, `invalid params: %s needs a "taskId"`, MethodMeshTaskResolve)
	case p.Approve == nil:
		return p, Errorf(CodeInvalidParams, `invalid params: %s needs "approve": true or false`, MethodMeshTaskResolve)
	case len(p.Reason) > protocol.MaxDecisionReason:
		return p, Errorf(CodeInvalidParams, `invalid params: "reason" is longer than %d bytes`, protocol.MaxDecisionReason)
	}
	return p, nil
}

// registerTaskEvents serves mesh.taskEvents, the operator's, with a
// Control only: the subscriptions are this connection's.
func (s *Server) registerTaskEvents() {
	if s.cfg.Control == nil {
		return
	}
	ctl := s.cfg.Control
	s.HandleLocal(MethodMeshTaskEvents, func(_ context.Context, r *Request) (any, error) {
		if err := NoParams(r); err != nil {
			return nil, err
		}
		subs := subsOf(r.Conn)
		subs.mu.Lock()
		defer subs.mu.Unlock()
		if subs.closed {
			return nil, ErrClosed
		}
		if len(subs.cancel) >= MaxMeshSubscriptions {
			return nil, Errorf(CodeInvalidParams, "invalid params: this connection already has %d mesh subscriptions, the most allowed; unsubscribe first", MaxMeshSubscriptions)
		}
		subs.next++
		id := "s" + strconv.Itoa(subs.next)
		conn := r.Conn
		cancel, err := ctl.SubscribeTaskEvents(func(c protocol.TaskChange) {
			_ = conn.Notify(MethodMeshTaskEvent, TaskEventParams{Subscription: id, Change: c})
		})
		if err != nil {
			return nil, protocol.AsError(err)
		}
		subs.cancel[id] = cancel
		return SubscribeResult{Subscription: id}, nil
	})
}

// TaskResolve runs mesh.taskResolve.
func (c *Client) TaskResolve(ctx context.Context, taskID string, approve bool, reason string) (*protocol.Task, error) {
	var out protocol.Task
	if err := c.Call(ctx, MethodMeshTaskResolve, TaskResolveParams{TaskID: taskID, Approve: &approve, Reason: reason}, &out); err != nil {
		if pe := ProtocolError(err); pe != nil {
			return nil, pe
		}
		return nil, fmt.Errorf("rpc: %s: %w", MethodMeshTaskResolve, err)
	}
	return &out, nil
}
