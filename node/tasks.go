package node

import (
	"context"
	"encoding/json"
	"slices"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Bounds of the task tables.
const (
	maxTasks         = 4096 // provider side: the oldest finished ones go first
	maxTaskProgress  = 64   // progress results kept per task
	maxOutgoingTasks = 4096 // requester side: task id -> provider
)

// task is a request as its provider tracks it.
type task struct {
	mu     sync.Mutex
	t      protocol.Task
	from   peer.ID
	cancel context.CancelFunc
	// cancelled is set when the requester cancelled the task.
	cancelled bool
}

func (t *task) set(n *Node, s protocol.TaskState, note string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.t.State.Final() || t.t.State == s {
		return
	}
	t.t.State = s
	t.t.History = append(t.t.History, protocol.TaskEvent{State: s, At: n.cfg.Now().UTC(), Note: note})
}

func (t *task) snapshot() protocol.Task {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.t
	c.History = slices.Clone(c.History)
	c.Progress = slices.Clone(c.Progress)
	return c
}

// taskTable holds a node's tasks, as provider, and the providers of the
// tasks it requested.
type taskTable struct {
	mu       sync.Mutex
	m        map[string]*task
	order    []string
	outgoing map[string]peer.ID
	outOrder []string
}

type taskKey struct{}

// taskOf returns the task a handler's context belongs to, or nil.
func taskOf(ctx context.Context) *task {
	t, _ := ctx.Value(taskKey{}).(*task)
	return t
}

// startTask records a request about to be checked and run, and returns
// the context its handler runs under (cancelled by task.cancel).
func (n *Node) startTask(ctx context.Context, from peer.ID, req *protocol.Request) (context.Context, *task) {
	ctx, cancel := context.WithCancel(ctx)
	t := &task{from: from, cancel: cancel, t: protocol.Task{ID: req.CorrelationID, Agent: n.idStr, Requester: from.String(), Capability: req.Action}}
	t.set(n, protocol.TaskValidating, "")
	tt := &n.tasks
	tt.mu.Lock()
	if tt.m == nil {
		tt.m = map[string]*task{}
	}
	if len(tt.m) >= maxTasks {
		// Forget the oldest finished task (running ones are kept).
		for i, id := range tt.order {
			if old := tt.m[id]; old == nil || old.snapshot().State.Final() {
				delete(tt.m, id)
				tt.order = slices.Delete(tt.order, i, i+1)
				break
			}
		}
	}
	if _, dup := tt.m[req.CorrelationID]; !dup {
		tt.order = append(tt.order, req.CorrelationID)
	}
	tt.m[req.CorrelationID] = t
	tt.mu.Unlock()
	return context.WithValue(ctx, taskKey{}, t), t
}

// finishTask records how a request ended.
func (n *Node) finishTask(t *task, res json.RawMessage, err error) {
	defer t.cancel()
	t.mu.Lock()
	state := t.t.State
	cancelled := t.cancelled
	t.mu.Unlock()
	switch {
	case err == nil:
		t.mu.Lock()
		t.t.Result = res
		t.mu.Unlock()
		t.set(n, protocol.TaskCompleted, "")
	case cancelled:
		t.set(n, protocol.TaskCancelled, "cancelled by the requester")
	case state == protocol.TaskValidating || state == protocol.TaskEscalated:
		// Seed 003: an escalated request is decided by a human, approved or
		// rejected; a handler's error there is that rejection, not a fault.
		t.mu.Lock()
		t.t.Error = protocol.AsError(err)
		t.mu.Unlock()
		t.set(n, protocol.TaskRejected, protocol.AsError(err).Message)
	default:
		t.mu.Lock()
		t.t.Error = protocol.AsError(err)
		t.mu.Unlock()
		t.set(n, protocol.TaskFailed, protocol.AsError(err).Message)
	}
}

// noteProgress keeps a handler's progress result in its task.
func (t *task) noteProgress(r json.RawMessage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.t.Progress) < maxTaskProgress {
		t.t.Progress = append(t.t.Progress, r)
	}
}

// taskRequest serves task.status and task.cancel for the requester of a
// task.
func (n *Node) taskRequest(from peer.ID, req *protocol.Request) (json.RawMessage, error) {
	var ref protocol.TaskRef
	if err := protocol.DecodePayload(req.Params, req.Action+" params", &ref); err != nil {
		return nil, err
	}
	if ref.TaskID == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, `%s takes {"task_id"}`, req.Action)
	}
	n.tasks.mu.Lock()
	t := n.tasks.m[ref.TaskID]
	n.tasks.mu.Unlock()
	if t == nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "no task %s here (unknown, or forgotten)", ref.TaskID)
	}
	if t.from != from {
		return nil, protocol.Errorf(protocol.CodeUnauthorized, "task %s belongs to another requester", ref.TaskID)
	}
	if req.Action == protocol.TaskCancelCapability {
		t.mu.Lock()
		final := t.t.State.Final()
		if !final {
			t.cancelled = true
		}
		t.mu.Unlock()
		if !final {
			t.cancel()
		}
	}
	return json.Marshal(t.snapshot())
}

// rememberTask notes the provider of a request this node sent.
func (n *Node) rememberTask(id string, provider peer.ID) {
	tt := &n.tasks
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if tt.outgoing == nil {
		tt.outgoing = map[string]peer.ID{}
	}
	if len(tt.outOrder) >= maxOutgoingTasks {
		delete(tt.outgoing, tt.outOrder[0])
		tt.outOrder = tt.outOrder[1:]
	}
	tt.outgoing[id] = provider
	tt.outOrder = append(tt.outOrder, id)
}

// TaskStatus asks the provider of a request this node sent (provider, or
// "" for the one the node remembers) for its task: state, history,
// progress so far and result.
func (n *Node) TaskStatus(ctx context.Context, taskID, provider string) (*protocol.Task, error) {
	return n.taskCall(ctx, protocol.TaskStatusCapability, taskID, provider)
}

// CancelTask asks the provider to cancel a request this node sent; the
// request's caller then gets an error, and the task ends CANCELLED.
func (n *Node) CancelTask(ctx context.Context, taskID, provider string) (*protocol.Task, error) {
	return n.taskCall(ctx, protocol.TaskCancelCapability, taskID, provider)
}

func (n *Node) taskCall(ctx context.Context, action, taskID, provider string) (*protocol.Task, error) {
	if taskID == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "a task id is required")
	}
	to := provider
	if to == "" {
		n.tasks.mu.Lock()
		p, ok := n.tasks.outgoing[taskID]
		n.tasks.mu.Unlock()
		if !ok {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "this node sent no request %s that it remembers; name its agent", taskID)
		}
		to = p.String()
	} else if _, err := sign.ParseAgentID(to); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "agent %q: %v", to, err)
	}
	params, _ := json.Marshal(protocol.TaskRef{TaskID: taskID})
	resp, err := n.Call(ctx, protocol.CallRequest{To: to, Action: action, Params: params})
	if err != nil {
		return nil, err
	}
	var t protocol.Task
	if err := protocol.DecodePayload(resp.Result, "task", &t); err != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "the provider's task is not readable: %v", err)
	}
	return &t, nil
}

// SetState lets a handler mark its request's task (ESCALATED, say, with a
// note). Final states are set by the node when the handler returns.
func (c *Call) SetState(s protocol.TaskState, note string) {
	if c.task != nil && !s.Final() {
		c.task.set(c.node, s, note)
	}
}
