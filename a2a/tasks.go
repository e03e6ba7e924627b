package a2a

import (
	"context"
	"encoding/json"
	"errors"
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

// Wait implements Tasks with mesh.taskWait, asked again every Poll while
// the task runs: a wait that times out carries the task's record so far,
// whose progress the gateway passes on.
func (m MeshTasks) Wait(ctx context.Context, taskID string, progress func(json.RawMessage)) (*protocol.SubmittedTask, error) {
	poll := m.Poll
	if poll <= 0 {
		poll = time.Second
	}
	seen := 0
	report := func(rec *protocol.SubmittedTask) {
		for ; seen < len(rec.Progress); seen++ {
			if progress != nil {
				progress(rec.Progress[seen])
			}
		}
	}
	for {
		rec, err := m.Client.TaskWait(ctx, taskID, poll)
		if err == nil {
			report(rec)
			return rec, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		pe := rpc.ProtocolError(err)
		if pe == nil {
			var re *protocol.Error
			if !errors.As(err, &re) {
				return nil, err
			}
			pe = re
		}
		var sofar protocol.SubmittedTask
		if len(pe.Details) == 0 || json.Unmarshal(pe.Details, &sofar) != nil {
			return nil, pe
		}
		report(&sofar)
		if pe.Code == protocol.CodeTimeout && !sofar.State.Final() {
			continue
		}
		return &sofar, pe
	}
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
