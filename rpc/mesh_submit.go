package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// Detached task methods (DESIGN.md, "Tasks outlive connections"). Their
// JSON shapes, for clients such as an A2A gateway:
//
//	mesh.submit   {"agentId","capability","params"?,"timeoutMs"?,"taskId"?,"deadline"?}
//	              → {"taskId","agentId","state"}
//	    the params of mesh.call (without receipt; agentId required), plus
//	    "deadline": how long the handler may run, a Go duration ("24h",
//	    "90m") up to 168h, default 24h. timeoutMs bounds the wait for the
//	    provider's acceptance; taskId, if given, is the request id (the
//	    correlation id a retry repeats); the provider chooses the task id.
//	mesh.taskWait {"taskId","timeoutMs"?}
//	              → {"taskId","agentId","requestId","capability","state",
//	                 "submitted","deadline","envelope"?,"result"?,"error"?,
//	                 "progress"?,"history"?}
//	    waits until the task ends or timeoutMs passes (default and limit
//	    MaxCallTimeout); a task that failed is its error (the AgentProtocol
//	    code, as mesh.call's); one still running at the timeout is
//	    TIMEOUT. "envelope" is the provider's signed final answer once it
//	    came back (a receipt meshagent verify accepts).
//	mesh.tasks    {"state"?} → {"tasks":[{"taskId","role","agentId",
//	                 "requester"?,"requestId","capability","state"}]}
//	    every task the node keeps on disk: "served" (it is the provider)
//	    and "submitted" (it asked), oldest first; "state" keeps one of
//	    seed 003's states, written as protocol's constants are (another
//	    value is -32602, never an empty list).
//
// Package localapi serves them.
const (
	MethodMeshSubmit   = "mesh.submit"
	MethodMeshTaskWait = "mesh.taskWait"
	MethodMeshTasks    = "mesh.tasks"
)

// DefaultDeadline is a detached task's deadline when mesh.submit names
// none: seed 003's escalation window.
const DefaultDeadline = 24 * time.Hour

// SubmitParams are the params of mesh.submit.
type SubmitParams struct {
	AgentID    string          `json:"agentId"`
	Capability string          `json:"capability"`
	Params     json.RawMessage `json:"params,omitempty"`
	TimeoutMS  int64           `json:"timeoutMs,omitempty"`
	TaskID     string          `json:"taskId,omitempty"`
	Deadline   string          `json:"deadline,omitempty"`
}

// TaskWaitParams are the params of mesh.taskWait.
type TaskWaitParams struct {
	TaskID    string `json:"taskId"`
	TimeoutMS int64  `json:"timeoutMs,omitempty"`
}

// TasksParams are the params of mesh.tasks.
type TasksParams struct {
	State protocol.TaskState `json:"state,omitempty"`
}

// TasksResult is the result of mesh.tasks.
type TasksResult struct {
	Tasks []protocol.TaskInfo `json:"tasks"`
}

// Submit runs mesh.submit.
func (c *Client) Submit(ctx context.Context, p SubmitParams) (*protocol.Submitted, error) {
	var out protocol.Submitted
	if err := c.Call(ctx, MethodMeshSubmit, p, &out); err != nil {
		if pe := ProtocolError(err); pe != nil {
			return nil, pe
		}
		return nil, err
	}
	return &out, nil
}

// TaskWait runs mesh.taskWait. A task that failed returns its error, with
// the task in the error's details.
func (c *Client) TaskWait(ctx context.Context, taskID string, timeout time.Duration) (*protocol.SubmittedTask, error) {
	var out protocol.SubmittedTask
	if err := c.Call(ctx, MethodMeshTaskWait, TaskWaitParams{TaskID: taskID, TimeoutMS: timeout.Milliseconds()}, &out); err != nil {
		if pe := ProtocolError(err); pe != nil {
			return nil, pe
		}
		return nil, err
	}
	return &out, nil
}

// Tasks runs mesh.tasks.
func (c *Client) Tasks(ctx context.Context, state protocol.TaskState) ([]protocol.TaskInfo, error) {
	var out TasksResult
	if err := c.Call(ctx, MethodMeshTasks, TasksParams{State: state}, &out); err != nil {
		if pe := ProtocolError(err); pe != nil {
			return nil, pe
		}
		return nil, err
	}
	return out.Tasks, nil
}

// FollowTask waits up to timeout (0: until ctx ends) for a task this node
// submitted to end, asking mesh.taskWait again every poll (default one
// second) so that each progress result reaches progress, in order and
// once, as it comes. It returns what TaskWait returns at the end; at the
// timeout, the record so far with a TIMEOUT error; when ctx ends first,
// ctx's error.
func (c *Client) FollowTask(ctx context.Context, taskID string, timeout, poll time.Duration, progress func(json.RawMessage)) (*protocol.SubmittedTask, error) {
	if poll <= 0 {
		poll = time.Second
	}
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	seen := 0
	report := func(rec *protocol.SubmittedTask) {
		for ; seen < len(rec.Progress); seen++ {
			if progress != nil {
				progress(rec.Progress[seen])
			}
		}
	}
	var sofar *protocol.SubmittedTask
	for {
		wait := poll
		if !deadline.IsZero() {
			if wait = min(wait, time.Until(deadline)); wait < time.Millisecond {
				pe := protocol.Errorf(protocol.CodeTimeout, "task %s has not ended yet", taskID)
				if sofar != nil {
					pe = pe.WithDetails(sofar)
				}
				return sofar, pe
			}
		}
		rec, err := c.TaskWait(ctx, taskID, wait)
		if err == nil {
			report(rec)
			return rec, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		pe := ProtocolError(err)
		if pe == nil {
			if !errors.As(err, &pe) {
				return nil, err
			}
		}
		var rec2 protocol.SubmittedTask
		if len(pe.Details) == 0 || json.Unmarshal(pe.Details, &rec2) != nil {
			if pe.Code == protocol.CodeTimeout {
				continue // a wait that ended before the task's record was read
			}
			return nil, pe
		}
		report(&rec2)
		sofar = &rec2
		if pe.Code == protocol.CodeTimeout && !rec2.State.Final() {
			continue
		}
		return sofar, pe
	}
}
