package a2a

import (
	"context"
	"encoding/json"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// Tasks is what the gateway needs of the mesh to run A2A tasks: one run of
// a capability as a mesh task whose id the gateway chooses, its status, and
// its cancellation. It is all the gateway knows of how mesh tasks work.
//
// Today it is implemented over what the local API has (MeshTasks):
// Run is one mesh.call naming the task id and blocks until the final
// response, so an A2A task lives as long as the gateway's call does, and
// the gateway keeps its state in memory (bounded; see WithMaxTasks).
// Status and Cancel are mesh.taskStatus and mesh.taskCancel, which ask the
// provider.
//
// When durable tasks land (mesh.submit, mesh.taskWait, mesh.tasks,
// mesh.taskResolve), Run becomes a submit plus a wait, so a task outlives
// the gateway and its connection; Status reads mesh.tasks, which also
// lists tasks for ListTasks after a restart; and the gateway's map becomes
// a cache of live streams rather than the record. Only this interface's
// implementation and ListTasks change.
type Tasks interface {
	// Run runs capability on agent with params as the mesh task taskID,
	// calling progress (never concurrently) with each in_progress result,
	// and returns the result or the mesh error (a *protocol.Error). It
	// returns when ctx ends.
	Run(ctx context.Context, agent, capability, taskID string, params json.RawMessage, timeout time.Duration, progress func(json.RawMessage)) (json.RawMessage, error)
	// Status returns what the provider knows of the task.
	Status(ctx context.Context, agent, taskID string) (*protocol.Task, error)
	// Cancel asks the provider to cancel the task.
	Cancel(ctx context.Context, agent, taskID string) (*protocol.Task, error)
}

// MeshTasks implements Tasks over a node's local API.
type MeshTasks struct {
	Client *rpc.Client
}

var _ Tasks = MeshTasks{}

// Run implements Tasks with mesh.call.
func (m MeshTasks) Run(ctx context.Context, agent, capability, taskID string, params json.RawMessage, timeout time.Duration, progress func(json.RawMessage)) (json.RawMessage, error) {
	req := protocol.CallRequest{To: agent, Action: capability, Params: params, CorrelationID: taskID, Timeout: timeout}
	resp, err := m.Client.MeshCall(ctx, req, func(r *protocol.Response) {
		if progress != nil && r != nil {
			progress(r.Result)
		}
	})
	if err != nil {
		return nil, err
	}
	return resp.Result, nil
}

// Status implements Tasks with mesh.taskStatus.
func (m MeshTasks) Status(ctx context.Context, agent, taskID string) (*protocol.Task, error) {
	return m.Client.Task(ctx, taskID, agent, false)
}

// Cancel implements Tasks with mesh.taskCancel.
func (m MeshTasks) Cancel(ctx context.Context, agent, taskID string) (*protocol.Task, error) {
	return m.Client.Task(ctx, taskID, agent, true)
}
