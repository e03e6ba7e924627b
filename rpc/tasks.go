package rpc

import (
	"context"

	"github.com/meshagent/meshagent/protocol"
)

// Tasker is implemented by a Mesh that tracks its requests as tasks
// (*node.Node is one). A server whose mesh is not one answers
// mesh.taskStatus and mesh.taskCancel with -32601.
type Tasker interface {
	TaskStatus(ctx context.Context, taskID, provider string) (*protocol.Task, error)
	CancelTask(ctx context.Context, taskID, provider string) (*protocol.Task, error)
}

// Task methods: the status of a request this node sent, and its
// cancellation. Params {"taskId", "agentId"?}; result a protocol.Task.
const (
	MethodMeshTaskStatus = "mesh.taskStatus"
	MethodMeshTaskCancel = "mesh.taskCancel"
)

// TaskParams are the params of mesh.taskStatus and mesh.taskCancel.
type TaskParams struct {
	TaskID string `json:"taskId"`
	// AgentID is the provider; optional when the node sent the request.
	AgentID string `json:"agentId,omitempty"`
}

func (s *Server) meshTask(ctx context.Context, r *Request) (any, error) {
	t, ok := s.mesh.(Tasker)
	if !ok {
		return nil, Errorf(CodeMethodNotFound, "method not found: %s (this node keeps no tasks)", r.Method)
	}
	var p TaskParams
	if len(r.Params) == 0 || r.Params[0] != '{' {
		return nil, Errorf(CodeInvalidParams, `invalid params: %s takes {"taskId", "agentId"?}`, r.Method)
	}
	if err := decodeStrict(r.Params, &p); err != nil {
		return nil, Errorf(CodeInvalidParams, `invalid params: %s: %v (it takes {"taskId", "agentId"?})`, r.Method, err)
	}
	if p.TaskID == "" {
		return nil, Errorf(CodeInvalidParams, `invalid params: %s needs "taskId", a non-empty string`, r.Method)
	}
	var (
		task *protocol.Task
		err  error
	)
	if r.Method == MethodMeshTaskCancel {
		task, err = t.CancelTask(ctx, p.TaskID, p.AgentID)
	} else {
		task, err = t.TaskStatus(ctx, p.TaskID, p.AgentID)
	}
	if err != nil {
		return nil, protocol.AsError(err)
	}
	return task, nil
}

// Task runs mesh.taskStatus, or mesh.taskCancel when cancel is set.
func (c *Client) Task(ctx context.Context, taskID, provider string, cancel bool) (*protocol.Task, error) {
	method := MethodMeshTaskStatus
	if cancel {
		method = MethodMeshTaskCancel
	}
	var t protocol.Task
	if err := c.Call(ctx, method, TaskParams{TaskID: taskID, AgentID: provider}, &t); err != nil {
		if pe := ProtocolError(err); pe != nil {
			return nil, pe
		}
		return nil, err
	}
	return &t, nil
}
