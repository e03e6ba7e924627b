package rpc

import (
	"context"

	"github.com/meshagent/meshagent/protocol"
)

// Task methods: the status of a request this node sent, and its
// cancellation. Params {"taskId", "agentId"?}; result a protocol.Task.
// Package localapi serves them.
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
