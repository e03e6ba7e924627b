package localapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// record notes a task method that reached the node.
func (n *fakeNode) record(format string, args ...any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.taskCalls = append(n.taskCalls, fmt.Sprintf(format, args...))
}

// lastTaskCall is the last task method that reached the node, or "".
func (n *fakeNode) lastTaskCall() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.taskCalls) == 0 {
		return ""
	}
	return n.taskCalls[len(n.taskCalls)-1]
}

// TaskStatus knows every task but "unknown".
func (n *fakeNode) TaskStatus(_ context.Context, id, provider string) (*protocol.Task, error) {
	n.record("status %s %s", id, provider)
	if id == "unknown" {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "no task %s", id)
	}
	return &protocol.Task{ID: id, Agent: provider, State: protocol.TaskApproved}, nil
}

// CancelTask cancels every task.
func (n *fakeNode) CancelTask(_ context.Context, id, provider string) (*protocol.Task, error) {
	n.record("cancel %s %s", id, provider)
	return &protocol.Task{ID: id, Agent: provider, State: protocol.TaskCancelled}, nil
}

// Submit accepts every task as "task-1" but one for "refused".
func (n *fakeNode) Submit(_ context.Context, req protocol.CallRequest, deadline time.Duration) (*protocol.Submitted, error) {
	n.record("submit %s %s %s %v %s %v", req.To, req.Action, req.Params, req.Timeout, req.CorrelationID, deadline)
	if req.To == "refused" {
		return nil, protocol.Errorf(protocol.CodeUnauthorized, "not you")
	}
	return &protocol.Submitted{TaskID: "task-1", AgentID: req.To, State: protocol.TaskPending}, nil
}

// TaskWait ends "t1" at once; "failed" failed (its record in the error);
// "running" is still running (the wait's TIMEOUT, at once, so that no
// fuzzed call waits); any other is not known.
func (n *fakeNode) TaskWait(ctx context.Context, id string, _ time.Duration, _ func(json.RawMessage)) (*protocol.SubmittedTask, error) {
	dl, _ := ctx.Deadline()
	n.record("wait %s %v", id, time.Until(dl).Round(time.Hour))
	rec := &protocol.SubmittedTask{TaskID: id, AgentID: fakemesh.PeerID, Capability: "echo"}
	switch id {
	case "t1":
		rec.State, rec.Result = protocol.TaskCompleted, json.RawMessage(`{"ok":true}`)
		return rec, nil
	case "failed":
		rec.State = protocol.TaskFailed
		return rec, protocol.Errorf(protocol.CodeRateLimited, "slow down")
	case "running":
		rec.State = protocol.TaskApproved
		return rec, protocol.Errorf(protocol.CodeTimeout, "task %s has not ended yet", id)
	}
	return nil, protocol.Errorf(protocol.CodeInvalidMessage, "no task %s", id)
}

// Tasks lists one task of the state asked for, none of FAILED.
func (n *fakeNode) Tasks(_ context.Context, state protocol.TaskState) ([]protocol.TaskInfo, error) {
	n.record("tasks %s", state)
	if state == protocol.TaskFailed {
		return nil, nil
	}
	return []protocol.TaskInfo{{TaskID: "t1", Role: protocol.TaskRoleServed, AgentID: fakemesh.SelfID, Capability: "echo", State: state}}, nil
}

// TaskResolve decides "esc"; any other task is not escalated.
func (n *fakeNode) TaskResolve(_ context.Context, id string, approve bool, reason string) (*protocol.Task, error) {
	n.record("resolve %s %v %s", id, approve, reason)
	if id != "esc" {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "task %s is not escalated", id)
	}
	return &protocol.Task{ID: id, State: protocol.TaskApproved}, nil
}

// checkRefused fails t unless calling method with each params is -32602
// with a message holding its want, and nothing reaches n.
func checkRefused(t *testing.T, c *rpc.Client, n *fakeNode, method string, cases map[string]string) {
	t.Helper()
	before := n.lastTaskCall()
	for params, want := range cases {
		err := c.Call(ctxT(t), method, json.RawMessage(params), nil)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, want) {
			t.Errorf("%s %s: %v, want -32602 with %q", method, params, err, want)
		}
	}
	if got := n.lastTaskCall(); got != before {
		t.Errorf("%s: refused params reached the node: %s", method, got)
	}
}

// TestMeshTask: mesh.taskStatus and mesh.taskCancel ask the node by task
// id and provider; params are strict (-32602 naming the member); the
// node's error is the client's; a server without Register is -32601.
func TestMeshTask(t *testing.T) {
	n := newFakeNode()
	c := rpctest.DialClient(t, serveMethods(t, n))
	task, err := c.Task(ctxT(t), "t1", fakemesh.PeerID, false)
	if err != nil || task.ID != "t1" || task.State != protocol.TaskApproved || n.lastTaskCall() != "status t1 "+fakemesh.PeerID {
		t.Fatalf("status: %+v %v (%s)", task, err, n.lastTaskCall())
	}
	task, err = c.Task(ctxT(t), "t2", "", true)
	if err != nil || task.State != protocol.TaskCancelled || n.lastTaskCall() != "cancel t2 " {
		t.Fatalf("cancel: %+v %v (%s)", task, err, n.lastTaskCall())
	}
	if _, err := c.Task(ctxT(t), "unknown", "", false); protocol.CodeOf(err) != protocol.CodeInvalidMessage {
		t.Fatalf("unknown task: %v, want INVALID_MESSAGE", err)
	}
	checkRefused(t, c, n, rpc.MethodMeshTaskStatus, map[string]string{
		`{"taskId":1}`:                `"taskId" must be a string`,
		`{"TASKID":"t1"}`:             `unknown field "TASKID"`,
		`{"taskId":"a","taskId":"b"}`: `duplicate member "taskId"`,
		`{}`:                          `needs "taskId"`,
		`[]`:                          `takes {"taskId", "agentId"?}`,
	})
	checkRefused(t, c, n, rpc.MethodMeshTaskCancel, map[string]string{
		`{"taskId":"t1","agentId":5}`: `"agentId" must be a string`,
	})
	if _, err := plainClient(t).Task(ctxT(t), "t1", "", false); rpcCode(err) != rpc.CodeMethodNotFound {
		t.Fatalf("mesh.taskStatus without Register: %v, want -32601", err)
	}
}

// TestMeshSubmit: mesh.submit hands the node the request and the
// deadline (24h unless given); malformed params never reach it.
func TestMeshSubmit(t *testing.T) {
	n := newFakeNode()
	c := rpctest.DialClient(t, serveMethods(t, n))
	sub, err := c.Submit(ctxT(t), rpc.SubmitParams{AgentID: "a", Capability: "echo", Params: json.RawMessage(`{"x":1}`), TimeoutMS: 1500, TaskID: "r1", Deadline: "90m"})
	if err != nil || sub.TaskID != "task-1" || sub.AgentID != "a" || sub.State != protocol.TaskPending {
		t.Fatalf("submit: %+v %v", sub, err)
	}
	if got, want := n.lastTaskCall(), `submit a echo {"x":1} 1.5s r1 1h30m0s`; got != want {
		t.Errorf("the node got %q, want %q", got, want)
	}
	if _, err := c.Submit(ctxT(t), rpc.SubmitParams{AgentID: "a", Capability: "echo"}); err != nil || n.lastTaskCall() != "submit a echo  0s  24h0m0s" {
		t.Errorf("default deadline: %v (%s)", err, n.lastTaskCall())
	}
	if _, err := c.Submit(ctxT(t), rpc.SubmitParams{AgentID: "refused", Capability: "echo"}); protocol.CodeOf(err) != protocol.CodeUnauthorized {
		t.Errorf("refused: %v, want UNAUTHORIZED", err)
	}
	checkRefused(t, c, n, rpc.MethodMeshSubmit, map[string]string{
		`{"capability":"echo"}`: `needs "agentId" and "capability"`,
		`{"agentId":"a"}`:       `needs "agentId" and "capability"`,
		`{"agentId":"a","capability":"echo","timeoutMs":-1}`:       `timeoutMs must be 0 to 3600000`,
		`{"agentId":"a","capability":"echo","timeoutMs":3600001}`:  `timeoutMs must be 0 to 3600000`,
		`{"agentId":"a","capability":"echo","params":[1]}`:         `params must be a JSON object`,
		`{"agentId":"a","capability":"echo","deadline":"forever"}`: `deadline "forever" is not a duration`,
		`{"agentId":"a","capability":"echo","deadline":"169h"}`:    `deadline "169h" is not a duration`,
		`{"agentId":"a","capability":"echo","deadline":"-1s"}`:     `deadline "-1s" is not a duration`,
		`{"agentId":1,"capability":"echo"}`:                        `"agentId" must be a string`,
		`{"agentId":"a","capability":"echo","extra":1}`:            `unknown field "extra"`,
		`[1]`: `takes {"agentId","capability"`,
	})
	if _, err := plainClient(t).Submit(ctxT(t), rpc.SubmitParams{AgentID: "a", Capability: "echo"}); rpcCode(err) != rpc.CodeMethodNotFound {
		t.Fatalf("mesh.submit without Register: %v, want -32601", err)
	}
}

// TestMeshTaskWait: mesh.taskWait answers the ended task; a failed one is
// its error with the record in the details; one still running at the
// timeout is TIMEOUT with the record, which FollowTask reads; the wait is
// at most an hour; malformed params never reach the node.
func TestMeshTaskWait(t *testing.T) {
	n := newFakeNode()
	c := rpctest.DialClient(t, serveMethods(t, n))
	rec, err := c.TaskWait(ctxT(t), "t1", 0)
	if err != nil || rec.State != protocol.TaskCompleted || string(rec.Result) != `{"ok":true}` {
		t.Fatalf("wait: %+v %v", rec, err)
	}
	if got := n.lastTaskCall(); got != "wait t1 1h0m0s" {
		t.Errorf("no timeoutMs: the node waited %q, want an hour", got)
	}
	_, err = c.TaskWait(ctxT(t), "failed", time.Second)
	var pe *protocol.Error
	var failed protocol.SubmittedTask
	if !errors.As(err, &pe) || pe.Code != protocol.CodeRateLimited || json.Unmarshal(pe.Details, &failed) != nil || failed.State != protocol.TaskFailed {
		t.Fatalf("failed task: %v, want RATE_LIMITED with the record in its details", err)
	}
	if _, err := c.TaskWait(ctxT(t), "gone", time.Second); protocol.CodeOf(err) != protocol.CodeInvalidMessage {
		t.Fatalf("unknown task: %v, want INVALID_MESSAGE", err)
	}
	rec, err = c.FollowTask(ctxT(t), "running", 50*time.Millisecond, 10*time.Millisecond, nil)
	if protocol.CodeOf(err) != protocol.CodeTimeout || rec == nil || rec.State != protocol.TaskApproved {
		t.Fatalf("running task: %+v %v, want TIMEOUT with the record so far", rec, err)
	}
	checkRefused(t, c, n, rpc.MethodMeshTaskWait, map[string]string{
		`{}`:                                  `needs "taskId" and a timeoutMs from 0 to 3600000`,
		`{"taskId":"t1","timeoutMs":-1}`:      `needs "taskId" and a timeoutMs from 0 to 3600000`,
		`{"taskId":"t1","timeoutMs":3600001}`: `needs "taskId" and a timeoutMs from 0 to 3600000`,
		`{"taskId":"t1","timeoutMs":"1"}`:     `"timeoutMs" must be`,
		`["t1"]`:                              `takes {"taskId","timeoutMs"?}`,
	})
}

// TestMeshTasks: mesh.tasks lists the node's tasks of the state asked
// for, all without params, [] when none; malformed params and a state
// seed 003 does not have (a typo, or the wrong case) are -32602, never
// an empty list.
func TestMeshTasks(t *testing.T) {
	n := newFakeNode()
	c := rpctest.DialClient(t, serveMethods(t, n))
	ts, err := c.Tasks(ctxT(t), protocol.TaskCompleted)
	if err != nil || len(ts) != 1 || ts[0].TaskID != "t1" || ts[0].State != protocol.TaskCompleted {
		t.Fatalf("tasks: %+v %v", ts, err)
	}
	for _, params := range []string{``, `null`, `{}`} {
		var raw json.RawMessage
		if params != "" {
			raw = json.RawMessage(params)
		}
		if err := c.Call(ctxT(t), rpc.MethodMeshTasks, raw, nil); err != nil || n.lastTaskCall() != "tasks " {
			t.Errorf("params %q: %v (%s), want every task", params, err, n.lastTaskCall())
		}
	}
	var raw json.RawMessage
	if err := c.Call(ctxT(t), rpc.MethodMeshTasks, map[string]string{"state": "FAILED"}, &raw); err != nil || string(raw) != `{"tasks":[]}` {
		t.Fatalf("none: %s %v, want {\"tasks\":[]}", raw, err)
	}
	checkRefused(t, c, n, rpc.MethodMeshTasks, map[string]string{
		`{"state":1}`:           `"state" must be a string`,
		`{"state":"BOGUS"}`:     `"BOGUS" is not a task state: one of PENDING, VALIDATING,`,
		`{"state":"completed"}`: `"completed" is not a task state`,
		`{"status":"x"}`:        `unknown field "status"`,
		`[]`:                    `takes {"state"?}`,
	})
}

// TestTaskResolve: RegisterOperator serves mesh.taskResolve, the
// operator's decision, read strictly; a task that is not escalated is
// the node's refusal; Register alone does not serve it.
func TestTaskResolve(t *testing.T) {
	n := newFakeNode()
	s := rpctest.Start(t, fakemesh.New())
	localapi.Register(s.Server, n)
	localapi.RegisterOperator(s.Server, n)
	c := rpctest.DialClient(t, s.URL)
	task, err := c.TaskResolve(ctxT(t), "esc", false, "no")
	if err != nil || task.ID != "esc" || n.lastTaskCall() != "resolve esc false no" {
		t.Fatalf("resolve: %+v %v (%s)", task, err, n.lastTaskCall())
	}
	if _, err := c.TaskResolve(ctxT(t), "t1", true, ""); protocol.CodeOf(err) != protocol.CodeInvalidMessage {
		t.Fatalf("not escalated: %v, want INVALID_MESSAGE", err)
	}
	checkRefused(t, c, n, rpc.MethodMeshTaskResolve, map[string]string{
		`{"taskId":"esc","approve":"yes"}`: `"approve"`,
		`{"taskId":"esc"}`:                 `"approve"`,
		`{"approve":true}`:                 `"taskId"`,
	})
	if _, err := rpctest.DialClient(t, serveMethods(t, n)).TaskResolve(ctxT(t), "esc", true, ""); rpcCode(err) != rpc.CodeMethodNotFound {
		t.Fatalf("mesh.taskResolve without RegisterOperator: %v, want -32601", err)
	}
}
