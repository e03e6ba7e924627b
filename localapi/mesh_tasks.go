package localapi

import (
	"context"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// task serves mesh.taskStatus and mesh.taskCancel (rpc.TaskParams): the
// status of a request this node sent, or its cancellation; the answer is
// the protocol.Task.
func (m methods) task(ctx context.Context, r *rpc.Request) (any, error) {
	var p rpc.TaskParams
	if err := rpc.ObjectParams(r, &p, `{"taskId", "agentId"?}`); err != nil {
		return nil, err
	}
	if p.TaskID == "" {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: %s needs "taskId", a non-empty string`, r.Method)
	}
	var (
		task *protocol.Task
		err  error
	)
	if r.Method == rpc.MethodMeshTaskCancel {
		task, err = m.n.CancelTask(ctx, p.TaskID, p.AgentID)
	} else {
		task, err = m.n.TaskStatus(ctx, p.TaskID, p.AgentID)
	}
	if err != nil {
		return nil, protocol.AsError(err)
	}
	return task, nil
}

// submit serves mesh.submit (rpc.SubmitParams): a detached task of the
// agent's capability, whose handler may run until the deadline (a Go
// duration up to protocol.MaxDetachMs, rpc.DefaultDeadline when none);
// timeoutMs, at most rpc.MaxCallTimeout, bounds the wait for the
// provider's acceptance. The answer is the protocol.Submitted.
func (m methods) submit(ctx context.Context, r *rpc.Request) (any, error) {
	const shape = `{"agentId","capability","params"?,"timeoutMs"?,"taskId"?,"deadline"?}`
	var p rpc.SubmitParams
	if err := rpc.ObjectParams(r, &p, shape); err != nil {
		return nil, err
	}
	switch {
	case p.AgentID == "" || p.Capability == "":
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: %s needs \"agentId\" and \"capability\"", r.Method)
	case p.TimeoutMS < 0 || p.TimeoutMS > rpc.MaxCallTimeout.Milliseconds():
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: timeoutMs must be 0 to %d", rpc.MaxCallTimeout.Milliseconds())
	case len(p.Params) > 0 && p.Params[0] != '{' && string(p.Params) != "null":
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: params must be a JSON object")
	}
	deadline := rpc.DefaultDeadline
	if p.Deadline != "" {
		d, err := time.ParseDuration(p.Deadline)
		if err != nil || d <= 0 || d.Milliseconds() > protocol.MaxDetachMs {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: deadline %q is not a duration from 1ms to 168h", p.Deadline)
		}
		deadline = d
	}
	sub, err := m.n.Submit(ctx, protocol.CallRequest{To: p.AgentID, Action: p.Capability, Params: p.Params,
		Timeout: time.Duration(p.TimeoutMS) * time.Millisecond, CorrelationID: p.TaskID}, deadline)
	if err != nil {
		return nil, protocol.AsError(err)
	}
	return sub, nil
}

// taskWait serves mesh.taskWait (rpc.TaskWaitParams): it waits until the
// task ends or timeoutMs passes (default and limit rpc.MaxCallTimeout).
// A task that failed, or is still running at the timeout, is the node's
// error with the task record so far in its details.
func (m methods) taskWait(ctx context.Context, r *rpc.Request) (any, error) {
	var p rpc.TaskWaitParams
	if err := rpc.ObjectParams(r, &p, `{"taskId","timeoutMs"?}`); err != nil {
		return nil, err
	}
	if p.TaskID == "" || p.TimeoutMS < 0 || p.TimeoutMS > rpc.MaxCallTimeout.Milliseconds() {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: %s needs \"taskId\" and a timeoutMs from 0 to %d", r.Method, rpc.MaxCallTimeout.Milliseconds())
	}
	timeout := rpc.MaxCallTimeout
	if p.TimeoutMS > 0 {
		timeout = time.Duration(p.TimeoutMS) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t, err := m.n.TaskWait(ctx, p.TaskID, 0, nil)
	if err != nil {
		pe := protocol.AsError(err)
		if t != nil {
			return nil, pe.WithDetails(t)
		}
		return nil, pe
	}
	return t, nil
}

// tasks serves mesh.tasks (rpc.TasksParams, which may be absent): every
// task the node keeps on disk, served and submitted, oldest first, of the
// state asked for or all; [] when none. A state that is none of seed
// 003's is refused (-32602), so that a typo never reads as "no tasks".
func (m methods) tasks(ctx context.Context, r *rpc.Request) (any, error) {
	var p rpc.TasksParams
	if len(r.Params) > 0 && string(r.Params) != "null" {
		if err := rpc.ObjectParams(r, &p, `{"state"?}`); err != nil {
			return nil, err
		}
		if p.State != "" {
			if err := p.State.Check(); err != nil {
				return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "state": %v`, err)
			}
		}
	}
	ts, err := m.n.Tasks(ctx, p.State)
	if err != nil {
		return nil, protocol.AsError(err)
	}
	return rpc.TasksResult{Tasks: orEmpty(ts)}, nil
}

// taskResolve serves the operator's mesh.taskResolve (params read by
// rpc.ParseTaskResolveParams): the decision on an escalated task the node
// serves; the answer is the task as it stands after it.
func (m methods) taskResolve(ctx context.Context, r *rpc.Request) (any, error) {
	p, err := rpc.ParseTaskResolveParams(r.Params)
	if err != nil {
		return nil, err
	}
	t, err := m.n.TaskResolve(ctx, p.TaskID, *p.Approve, p.Reason)
	if err != nil {
		return nil, protocol.AsError(err)
	}
	return t, nil
}
