package node

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// Detached tasks (DESIGN.md, "Tasks outlive connections"). A requester
// submits a request with Request.Detach set (Submit); the provider answers
// as soon as it recorded the task on disk (protocol.Submitted), runs the
// handler until the deadline whether or not the requester stays, and
// when the task ends sends its signed final response to the requester
// as a task.result request through its outbox (and the requester's
// mailboxes when it is away). The requester's node records what it
// submitted and what came back (submittedRequester records in its
// store), so TaskWait answers from the record once the answer is there.

// maxDetachedRunning bounds the detached tasks whose handlers run at once
// on a provider; past it a submission is refused, RATE_LIMITED, before it
// is accepted.
const maxDetachedRunning = 1024

// submittedRequester is the requester name of the records a requester
// keeps of its submissions (no agent id starts with "@").
const submittedRequester = "@submitted"

// durableRun marks a run whose task is recorded in the store: accepted
// and final are called once it is recorded and approved, and once it has
// its answer (both nil for a request from a mailbox).
type durableRun struct {
	detach   time.Time // a detached task's deadline
	accepted func(*task)
	final    func(*task)
	// park, when set, is called once the task's handler left its answer
	// to an escalation's decision: the task no longer runs.
	park func()
}

// serveDetached accepts a detached request and answers with its task id,
// or refuses it before accepting; the task runs on a goroutine of the
// node's until its deadline.
func (ss *serverStream) serveDetached(from requester, req *protocol.Request) {
	n := ss.n
	if n.tasks.st == nil {
		ss.reply(req.CorrelationID, nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "this agent keeps no tasks on disk (no store): call without detaching"))
		return
	}
	if !n.services.runsAsTask(req.Action) {
		ss.reply(req.CorrelationID, nil, protocol.Errorf(protocol.CodeInvalidMessage, "%s cannot be detached", req.Action))
		return
	}
	select {
	case n.detached <- struct{}{}:
	default:
		ss.reply(req.CorrelationID, nil, protocol.Errorf(protocol.CodeRateLimited, "%d detached tasks run here already, the limit; try again later", maxDetachedRunning))
		return
	}
	if !n.track() {
		<-n.detached
		ss.reply(req.CorrelationID, nil, ErrClosed)
		return
	}
	deadline := time.Duration(req.Detach) * time.Millisecond
	ctx, cancel := context.WithTimeout(n.ctx, deadline)
	detachAt := n.cfg.Now().Add(deadline)
	accepted := make(chan *task, 1)
	done := make(chan struct{})
	var (
		res json.RawMessage
		err error
	)
	// The running slot is given back when the handler returns, or when it
	// left its answer to an escalation's decision (a task awaiting a
	// decision holds none: maxEscalated bounds those).
	var slotOnce sync.Once
	releaseSlot := func() { slotOnce.Do(func() { <-n.detached }) }
	d := &durableRun{
		detach:   detachAt,
		accepted: func(t *task) { accepted <- t },
		final:    n.deliverFinal,
		park:     releaseSlot,
	}
	go func() {
		defer n.wg.Done()
		defer releaseSlot()
		defer cancel()
		defer close(done)
		// Nobody follows a detached task's stream: its progress is kept
		// for task.status (and mesh.taskWait), so sending it never fails.
		res, err = n.run(ctx, cancel, from, ss.remStr, req, d, func(json.RawMessage) error { return nil }, d)
	}()
	select {
	case t := <-accepted:
		snap := t.snapshot()
		ss.reply(req.CorrelationID, mustCanonical(protocol.Submitted{TaskID: snap.ID, AgentID: n.idStr, State: snap.State}), nil)
	case <-done:
		// Refused before it was accepted.
		ss.reply(req.CorrelationID, res, err)
	}
}

func mustCanonical(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err == nil {
		b, err = protocol.MarshalCanonical(json.RawMessage(b))
	}
	if err != nil {
		panic(fmt.Sprintf("node: encoding %T: %v", v, err)) // a fixed struct of strings
	}
	return b
}

// deliverFinal sends a detached task's signed final response to its
// requester through the outbox: delivered at once when the requester is
// there, kept (and handed to its mailboxes) while it is away.
func (n *Node) deliverFinal(t *task) {
	snap := t.snapshot()
	res, err := t.answer()
	var (
		env  json.RawMessage
		serr error
	)
	to := t.key.from.agent.String()
	if err != nil {
		pe := *protocol.AsError(err)
		pe.CorrelationID = t.key.id
		env, serr = n.sealJSON(protocol.TypeError, to, &pe)
	} else {
		env, serr = n.sealJSON(protocol.TypeResponse, to, &protocol.Response{CorrelationID: t.key.id, Status: protocol.StatusSuccess, Result: res})
	}
	if serr == nil {
		var params []byte
		params, serr = json.Marshal(protocol.TaskResult{TaskID: snap.ID, RequestID: t.key.id, Envelope: env})
		if serr == nil {
			_, serr = n.Forward(context.Background(), "task-result-"+snap.ID, to, protocol.TaskResultCapability, params)
		}
	}
	if serr != nil {
		n.log.Error("final answer of a detached task not sent", "task", snap.ID, "requester", to, "err", serr)
	}
}

// Submit sends req as a detached task that may run until deadline (at
// most 7 days; 0: 24 hours) and returns once the provider accepted and
// recorded it. The node records the submission in its store (it needs
// one), so TaskWait and Tasks know it across restarts.
func (n *Node) Submit(ctx context.Context, req protocol.CallRequest, deadline time.Duration) (*protocol.Submitted, error) {
	if n.cfg.Store == nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "this node keeps no store: a detached task needs one")
	}
	if deadline <= 0 {
		deadline = 24 * time.Hour
	}
	if deadline.Milliseconds() > protocol.MaxDetachMs {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "a deadline of %s is past the limit of 7 days", deadline)
	}
	to, err := sign.ParseAgentID(req.To)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "target agent: %v", err)
	}
	if to == n.id {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "a node does not submit detached tasks to itself")
	}
	out, err := n.newOutgoing(req)
	if err != nil {
		return nil, err
	}
	out.request.Detach = deadline.Milliseconds()
	ctx, cancel := context.WithTimeout(ctx, out.timeout)
	defer cancel()
	start := time.Now()
	resp, _, err := n.callPeer(ctx, ctx, to, to.String(), out)
	n.observeSent(req.Action, to.String(), err, start)
	if err != nil {
		return nil, err
	}
	var sub protocol.Submitted
	if err := protocol.DecodeStrict(resp.Result, &sub); err != nil || sub.TaskID == "" {
		return nil, protocol.Errorf(protocol.CodeInternalError, "the provider's answer to a detached request is not a task: %s", compact(resp.Result))
	}
	if sub.AgentID != to.String() {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "the provider's answer names agent %s, not %s", sub.AgentID, to)
	}
	now := n.cfg.Now().UTC()
	rec := protocol.SubmittedTask{TaskID: sub.TaskID, AgentID: sub.AgentID, RequestID: out.request.CorrelationID, Capability: req.Action,
		State: sub.State, Submitted: now, Deadline: now.Add(deadline)}
	if err := n.saveSubmitted(ctx, rec, true); err != nil {
		return &sub, err
	}
	n.sent.remember(sub.TaskID, to)
	return &sub, nil
}

// saveSubmitted writes rec (first: a new record). Records are kept until
// their deadline plus the message TTL.
func (n *Node) saveSubmitted(ctx context.Context, rec protocol.SubmittedTask, first bool) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("node: encode submitted task: %w", err)
	}
	r := store.TaskRecord{ID: "sub-" + rec.TaskID, Requester: submittedRequester, RequestID: rec.TaskID,
		Final: rec.Envelope != nil || rec.State.Final(), Expires: rec.Deadline.Add(n.cfg.MessageTTL), Data: data}
	ctx = context.WithoutCancel(ctx)
	if first {
		err = n.cfg.Store.AddTask(ctx, r, n.cfg.TaskBounds)
	} else {
		err = n.cfg.Store.UpdateTask(ctx, r)
	}
	if err != nil {
		return protocol.Errorf(protocol.CodeInternalError, "the task %s was accepted, but this node could not record it: %v", rec.TaskID, err)
	}
	return nil
}

// updateSubmitted applies fn to the record of a task this node submitted
// and writes it, under the node's lock of those records, so that two
// writers (TaskWait, task.result) never write over each other.
func (n *Node) updateSubmitted(ctx context.Context, taskID string, fn func(*protocol.SubmittedTask)) (protocol.SubmittedTask, error) {
	n.submittedMu.Lock()
	defer n.submittedMu.Unlock()
	rec, err := n.submitted(ctx, taskID)
	if err != nil {
		return rec, err
	}
	fn(&rec)
	return rec, n.saveSubmitted(ctx, rec, false)
}

// submitted reads the record of a task this node submitted.
func (n *Node) submitted(ctx context.Context, taskID string) (protocol.SubmittedTask, error) {
	var rec protocol.SubmittedTask
	if n.cfg.Store == nil {
		return rec, store.ErrNotFound
	}
	r, err := n.cfg.Store.Task(ctx, "sub-"+taskID)
	if err != nil {
		return rec, err
	}
	if err := protocol.DecodeStrict(r.Data, &rec); err != nil {
		return rec, fmt.Errorf("node: submitted task record %s: %w", taskID, err)
	}
	return rec, nil
}

// receiveTaskResult serves task.result: the provider of a task this node
// submitted sends its final answer. The envelope must be the provider's,
// signed, addressed to this node, and answer the submitted request.
func (n *Node) receiveTaskResult(ctx context.Context, from requester, req *protocol.Request) (json.RawMessage, error) {
	var tr protocol.TaskResult
	if err := protocol.DecodeStrict(req.Params, &tr); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "task.result params: %v", err)
	}
	rec, err := n.submitted(ctx, tr.TaskID)
	if err != nil || rec.AgentID != from.agent.String() || from.client != "" || rec.RequestID != tr.RequestID {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "this node submitted no task %s to you", tr.TaskID)
	}
	e, _, err := protocol.OpenJSON(tr.Envelope)
	if err != nil {
		return nil, err
	}
	if sender, err := e.Sender(); err != nil || sender != from.agent {
		return nil, protocol.Errorf(protocol.CodeInvalidSignature, "the final answer of task %s is not signed by its provider", tr.TaskID)
	}
	if e.To == nil || e.To.AgentID != n.idStr {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "the final answer of task %s is not addressed to this agent", tr.TaskID)
	}
	resp, rerr := protocol.DecodeResponse(e)
	switch {
	case rerr == nil && resp.Status.Final() && resp.CorrelationID == rec.RequestID:
		rec.State, rec.Result = protocol.TaskCompleted, resp.Result
	case rerr != nil && protocol.AsError(rerr).CorrelationID == rec.RequestID && e.Type == protocol.TypeError:
		rec.State, rec.Error = rejectedOrFailed(protocol.AsError(rerr)), protocol.AsError(rerr)
	default:
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "the final answer of task %s does not answer request %s", tr.TaskID, rec.RequestID)
	}
	if _, err := n.updateSubmitted(ctx, tr.TaskID, func(r *protocol.SubmittedTask) {
		if r.Envelope == nil { // else a repeat
			r.State, r.Result, r.Error, r.Envelope = rec.State, rec.Result, rec.Error, tr.Envelope
		}
	}); err != nil {
		return nil, err
	}
	n.log.Info("final answer of a submitted task recorded", "task", tr.TaskID, "provider", from.agent, "state", rec.State)
	return json.RawMessage(`{"recorded":true}`), nil
}

// rejectedOrFailed is the state a task that ended with err ended in, as
// its requester learns it from the final answer: REJECTED when its
// provider says so in the error's details (an operator's rejection,
// decisionAnswer), FAILED otherwise.
func rejectedOrFailed(err *protocol.Error) protocol.TaskState {
	var d struct {
		State protocol.TaskState `json:"state"`
	}
	if len(err.Details) > 0 && json.Unmarshal(err.Details, &d) == nil && d.State == protocol.TaskRejected {
		return protocol.TaskRejected
	}
	return protocol.TaskFailed
}

// TaskWait follows a task this node submitted until it ends, or ctx does:
// progress gets each new progress result. It answers from the node's
// record once the final answer came back (even with the provider gone),
// and otherwise asks the provider (task.status) every poll. The task's
// error, when it failed, is the error returned with it.
func (n *Node) TaskWait(ctx context.Context, taskID string, poll time.Duration, progress func(json.RawMessage)) (*protocol.SubmittedTask, error) {
	if poll <= 0 {
		poll = time.Second
	}
	seen := 0
	for {
		rec, err := n.submitted(ctx, taskID)
		if err != nil {
			if ctx.Err() != nil {
				// The wait ended while the store was busy: not an
				// unknown task, which would end a follower for good.
				return nil, protocol.Errorf(protocol.CodeTimeout, "task %s: no answer from the store within the wait", taskID)
			}
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "this node submitted no task %s that it remembers", taskID)
		}
		// Once the final answer came back the record lacks the progress
		// and history that followed its last status: ask the provider once
		// more, if it is still connected, so a follower sees every step.
		if rec.Envelope == nil || rec.History == nil && n.connectedTo(rec.AgentID) {
			// The status call is not cut by ctx: a follower polling with a
			// short wait (mesh.taskWait of a second, as task wait does)
			// would otherwise never see progress while a round trip to
			// the provider takes longer than its wait, as on a loaded
			// machine. A wait overruns by one round trip at most.
			callCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(n.cfg.RequestTimeout, 10*time.Second))
			t, err := n.TaskStatus(callCtx, taskID, rec.AgentID)
			cancel()
			if err == nil {
				for ; seen < len(t.Progress); seen++ {
					if progress != nil {
						progress(t.Progress[seen])
					}
				}
				if t.State.Final() {
					// Recorded under the lock, over the record as it is
					// now: the final envelope may have come meanwhile.
					upd, err := n.updateSubmitted(ctx, taskID, func(r *protocol.SubmittedTask) {
						if r.Envelope == nil {
							r.State, r.Progress, r.History, r.Result, r.Error = t.State, t.Progress, t.History, t.Result, t.Error
						} else {
							r.Progress, r.History = t.Progress, t.History
						}
					})
					if err != nil {
						n.log.Warn("task state not recorded", "task", taskID, "err", err)
					} else {
						rec = upd
					}
				} else if rec.Envelope == nil {
					rec.State, rec.Progress, rec.History = t.State, t.Progress, t.History
				}
			} else if ctx.Err() != nil && rec.Envelope == nil {
				return &rec, protocol.Errorf(protocol.CodeTimeout, "task %s has not ended yet (%s)", taskID, rec.State)
			}
		}
		if rec.Envelope != nil || rec.State.Final() {
			for ; seen < len(rec.Progress); seen++ {
				if progress != nil {
					progress(rec.Progress[seen])
				}
			}
			if rec.Error != nil {
				e := *rec.Error
				return &rec, &e
			}
			if rec.State != protocol.TaskCompleted {
				return &rec, protocol.Errorf(protocol.CodeInternalError, "task %s ended %s", taskID, rec.State)
			}
			return &rec, nil
		}
		select {
		case <-ctx.Done():
			return &rec, protocol.Errorf(protocol.CodeTimeout, "task %s has not ended yet (%s)", taskID, rec.State)
		case <-n.ctx.Done():
			return &rec, ErrClosed
		case <-time.After(poll):
		}
	}
}

// Tasks lists the tasks recorded in the node's store, served and
// submitted, in id order (that is, oldest first); state, when not empty,
// keeps only those in it. At most the store's task bound of them.
func (n *Node) Tasks(ctx context.Context, state protocol.TaskState) ([]protocol.TaskInfo, error) {
	if n.cfg.Store == nil {
		return nil, nil
	}
	var out []protocol.TaskInfo
	var bad error
	err := n.cfg.Store.Tasks(ctx, func(r store.TaskRecord) bool {
		var ti protocol.TaskInfo
		if r.Requester == submittedRequester {
			var s protocol.SubmittedTask
			if err := protocol.DecodeStrict(r.Data, &s); err != nil {
				bad = err
				return true
			}
			ti = protocol.TaskInfo{TaskID: s.TaskID, Role: protocol.TaskRoleSubmitted, AgentID: s.AgentID, RequestID: s.RequestID, Capability: s.Capability, State: s.State}
		} else {
			d, err := decodeDiskTask(r)
			if err != nil {
				bad = err
				return true
			}
			ti = protocol.TaskInfo{TaskID: r.ID, Role: protocol.TaskRoleServed, AgentID: n.idStr, Requester: r.Requester, RequestID: r.RequestID, Capability: d.Task.Capability, State: d.Task.State}
			if live := n.tasks.liveState(r.Requester, r.RequestID); live != "" {
				ti.State = live
			}
		}
		if state == "" || ti.State == state {
			out = append(out, ti)
		}
		return true
	})
	if err == nil && bad != nil {
		n.log.Warn("unreadable task record skipped", "err", bad)
	}
	slices.SortStableFunc(out, func(a, b protocol.TaskInfo) int {
		switch {
		case a.TaskID < b.TaskID:
			return -1
		case a.TaskID > b.TaskID:
			return 1
		}
		return 0
	})
	return out, err
}

// liveState is the state of a running task of the table, which its
// record may not have yet ("" when none runs).
func (tt *taskTable) liveState(requesterStr, requestID string) protocol.TaskState {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	for k, t := range tt.m {
		if k.id == requestID && k.from.String() == requesterStr {
			t.mu.Lock()
			defer t.mu.Unlock()
			return t.t.State
		}
	}
	return ""
}

// connectedTo reports whether the node holds a connection to agent.
func (n *Node) connectedTo(agent string) bool {
	id, err := sign.ParseAgentID(agent)
	return err == nil && n.host.Network().Connectedness(id) == network.Connected
}
