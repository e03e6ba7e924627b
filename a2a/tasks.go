package a2a

import (
	"context"
	"encoding/json"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// Tasks is what the gateway needs of the mesh to run A2A tasks: durable
// mesh tasks (DESIGN.md, "Tasks outlive connections") that it submits,
// follows, lists and cancels. An A2A task is one mesh task and has its id,
// so a task outlives the gateway: after a restart GetTask, SubscribeToTask,
// CancelTask and ListTasks find it through the node's task records.
type Tasks interface {
	// Submit starts capability on agent with params as a detached mesh
	// task that may run for deadline, and returns its id once the
	// provider has accepted and recorded it.
	Submit(ctx context.Context, agent, capability string, params json.RawMessage, deadline time.Duration) (string, error)
	// Wait follows the task until it ends or ctx ends, calling progress
	// (never concurrently) with each progress result not seen before. It
	// returns the task's record: with a nil error when it completed, with
	// its error (a *protocol.Error) when it ended otherwise. When ctx ends
	// first it returns ctx's error.
	Wait(ctx context.Context, taskID string, progress func(json.RawMessage)) (*protocol.SubmittedTask, error)
	// List returns the tasks this node submitted to agent, oldest first.
	List(ctx context.Context, agent string) ([]protocol.TaskInfo, error)
	// Cancel asks the provider to cancel the task.
	Cancel(ctx context.Context, agent, taskID string) (*protocol.Task, error)
}

// MeshTasks implements Tasks over a node's local API: mesh.submit,
// mesh.taskWait, mesh.tasks and mesh.taskCancel.
type MeshTasks struct {
	Client *rpc.Client
	// Poll is how long one mesh.taskWait waits before the gateway looks
	// for new progress. Default one second.
	Poll time.Duration
}

var _ Tasks = MeshTasks{}

// Submit implements Tasks with mesh.submit.
func (m MeshTasks) Submit(ctx context.Context, agent, capability string, params json.RawMessage, deadline time.Duration) (string, error) {
	sub, err := m.Client.Submit(ctx, rpc.SubmitParams{AgentID: agent, Capability: capability, Params: params, Deadline: deadline.String()})
	if err != nil {
		return "", err
	}
	return sub.TaskID, nil
}

// Wait implements Tasks with rpc.Client.FollowTask: mesh.taskWait asked
// again every Poll while the task runs, its progress passed on.
func (m MeshTasks) Wait(ctx context.Context, taskID string, progress func(json.RawMessage)) (*protocol.SubmittedTask, error) {
	return m.Client.FollowTask(ctx, taskID, 0, m.Poll, progress)
}

// List implements Tasks with mesh.tasks.
func (m MeshTasks) List(ctx context.Context, agent string) ([]protocol.TaskInfo, error) {
	all, err := m.Client.Tasks(ctx, "")
	if err != nil {
		return nil, err
	}
	var out []protocol.TaskInfo
	for _, t := range all {
		if t.Role == protocol.TaskRoleSubmitted && t.AgentID == agent {
			out = append(out, t)
		}
	}
	return out, nil
}

// Cancel implements Tasks with mesh.taskCancel.
func (m MeshTasks) Cancel(ctx context.Context, agent, taskID string) (*protocol.Task, error) {
	return m.Client.Task(ctx, taskID, agent, true)
}
