package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/meshagent/meshagent/protocol"
)

// maxTaskEvents bounds the progress and state changes of one task queued
// for the node; a client that sends more while the node is still passing
// the earlier ones on loses the surplus (logged).
const maxTaskEvents = 256

// handling is one task handed to a connection: the client's mesh.progress
// and mesh.setState for it, queued in arrival order on the connection's
// read loop and passed to the node by the goroutine waiting for the
// answer, so that all of them reach the node before the answer does.
type handling struct {
	task *Task
	// escalated is called, on the handling goroutine, once the client
	// escalated the task.
	escalated func()

	mu     sync.Mutex
	events []func()
	closed bool
	wake   chan struct{} // buffered 1
}

// queue adds an event unless the task has been answered.
func (h *handling) queue(f func()) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || len(h.events) >= maxTaskEvents {
		return false
	}
	h.events = append(h.events, f)
	select {
	case h.wake <- struct{}{}:
	default:
	}
	return true
}

// flush runs the queued events in order.
func (h *handling) flush() {
	h.mu.Lock()
	evs := h.events
	h.events = nil
	h.mu.Unlock()
	for _, f := range evs {
		f()
	}
}

// handle is the TaskHandler the node calls for every request for a
// served capability, after its checks: it hands the task to the serving
// connection with the fewest requests in flight and waits for its answer.
func (t *serveTable) handle(ctx context.Context, task *Task) (json.RawMessage, error) {
	name := task.Capability
	sc, release, err := t.pick(ctx, func() *pool {
		if c := t.caps[name]; c != nil {
			return c.pool
		}
		return nil
	})
	if errors.Is(err, errNoServer) {
		return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "no client of this agent serves %s any longer", name)
	}
	if err != nil {
		return nil, err
	}
	defer release()

	id := protocol.NewID()
	h := &handling{task: task, wake: make(chan struct{}, 1)}
	t.mu.Lock()
	sc.tasks[id] = h
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		delete(sc.tasks, id)
		t.mu.Unlock()
	}()

	// Once the client escalated the task, the operator's decision goes to
	// it (mesh.taskResolved) while it still handles the task.
	decisionCtx, stopDecision := context.WithCancel(ctx)
	var watching sync.WaitGroup
	defer func() {
		stopDecision()
		watching.Wait()
	}()
	watched := false
	h.escalated = func() {
		if watched || task.Decision == nil {
			return
		}
		watched = true
		watching.Go(func() {
			d, err := task.Decision(decisionCtx)
			if err == nil {
				_ = sc.c.Notify(MethodMeshTaskResolved, TaskResolvedParams{TaskID: id, Approved: d.Approved, Reason: d.Reason})
			}
		})
	}
	params := HandleParams{TaskID: id, Requester: task.Requester, Capability: name, Params: task.Params, CorrelationID: task.CorrelationID, RequesterTaskID: task.ID}
	if len(params.Params) == 0 || isNull(params.Params) {
		params.Params = json.RawMessage("{}")
	}
	if !task.Deadline.IsZero() {
		params.Deadline = task.Deadline.UTC().Format(deadlineLayout)
	}
	var res json.RawMessage
	answered := make(chan error, 1)
	// The call runs on a goroutine of its own so that this one can pass
	// the task's events to the node while it waits; it ends when the
	// client answers, ctx ends or the connection closes.
	go func() { answered <- sc.c.Call(ctx, MethodMeshHandle, params, &res) }()
wait:
	for {
		select {
		case <-h.wake:
			h.flush()
		case err = <-answered:
			break wait
		}
	}
	// Events the client sent before its answer are queued by now (the read
	// loop queues them before it delivers the answer): pass them on, and
	// drop any later ones.
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.flush()
	switch {
	case err == nil:
		return res, nil
	case ctx.Err() != nil:
		// The requester cancelled, or the deadline passed: tell the client
		// to stop. Its late answer finds no call waiting and is dropped.
		_ = sc.c.Notify(MethodMeshCancel, CancelParams{TaskID: id})
		return nil, fmt.Errorf("rpc: %s: %w", name, ctx.Err())
	case errors.Is(err, ErrClosed), errors.Is(err, ErrSlowConsumer):
		return nil, protocol.Errorf(protocol.CodeInternalError, "the client serving %s disconnected before it answered", name)
	}
	if pe := ProtocolError(err); pe != nil {
		pe.CorrelationID = ""
		return nil, pe
	}
	var re *Error
	if errors.As(err, &re) && re.Code == CodeEscalated && task.Escalate != nil {
		// The client leaves the answer to the operator's decision; its
		// message is the reason, unless it escalated the task already.
		reason := re.Message
		if len(reason) > protocol.MaxDecisionReason {
			reason = reason[:protocol.MaxDecisionReason]
		}
		if err := task.Escalate(reason); err != nil {
			return nil, err
		}
		return nil, ErrEscalated
	}
	if errors.As(err, &re) {
		return nil, protocol.Errorf(protocol.CodeInternalError, "the client serving %s failed: %s", name, re.Message)
	}
	return nil, protocol.Errorf(protocol.CodeInternalError, "the client serving %s failed: %v", name, err)
}

// taskOf returns the task id names on c, or nil.
func (t *serveTable) taskOf(c *Conn, id string) *handling {
	t.mu.Lock()
	defer t.mu.Unlock()
	if sc := t.conns[c]; sc != nil {
		return sc.tasks[id]
	}
	return nil
}

// meshTaskProgress serves the client's mesh.progress notification, on
// the read loop: the progress is queued for the task's goroutine.
func (s *Server) meshTaskProgress(_ context.Context, r *Request) (any, error) {
	var p TaskProgressParams
	if err := DecodeParams(r.Method, r.Params, &p); err != nil {
		r.Conn.log.Debug("mesh.progress ignored", "err", err)
		return nil, err
	}
	h := s.serving.taskOf(r.Conn, p.TaskID)
	if h == nil {
		r.Conn.log.Debug("mesh.progress for no task of this connection", "task_id", p.TaskID)
		return nil, nil
	}
	result := p.Result
	if len(result) == 0 {
		result = json.RawMessage("null")
	}
	if !h.queue(func() { _ = h.task.Progress(result) }) {
		r.Conn.log.Warn("progress dropped: the task has been answered or has too much queued", "task_id", p.TaskID)
	}
	return nil, nil
}

// meshSetState serves the client's mesh.setState notification, on the
// read loop. Only the node sets final states, when the answer comes.
func (s *Server) meshSetState(_ context.Context, r *Request) (any, error) {
	var p SetStateParams
	if err := DecodeParams(r.Method, r.Params, &p); err != nil {
		r.Conn.log.Debug("mesh.setState ignored", "err", err)
		return nil, err
	}
	switch p.State {
	case protocol.TaskPending, protocol.TaskValidating, protocol.TaskApproved, protocol.TaskEscalated:
	default:
		r.Conn.log.Debug("mesh.setState ignored: not a state a client may set", "task_id", p.TaskID, "state", p.State)
		return nil, Errorf(CodeInvalidParams, "invalid params: mesh.setState: %q is not a state a client may set", p.State)
	}
	h := s.serving.taskOf(r.Conn, p.TaskID)
	if h == nil {
		r.Conn.log.Debug("mesh.setState for no task of this connection", "task_id", p.TaskID)
		return nil, nil
	}
	if !h.queue(func() {
		if p.State == protocol.TaskEscalated && h.task.Escalate != nil {
			if err := h.task.Escalate(p.Reason); err != nil {
				r.Conn.log.Warn("task not escalated", "task_id", p.TaskID, "err", err)
				return
			}
			h.escalated()
			return
		}
		h.task.SetState(p.State)
	}) {
		r.Conn.log.Warn("state change dropped: the task has been answered or has too much queued", "task_id", p.TaskID)
	}
	return nil, nil
}
