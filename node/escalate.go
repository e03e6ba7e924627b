package node

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// Escalation (seed 003's ESCALATED: "requires human intervention"). A
// handler hands its request to the provider's operator with
// Call.Escalate; the operator decides with Node.TaskResolve (meshagent
// task resolve, mesh.taskResolve). A handler that needs the decision to
// go on waits for it with Call.Decision; a handler that has nothing to
// add returns ErrEscalated, and the decision is then the request's
// answer: approved, the task ends COMPLETED with {"approved":true,
// "reason":…}; rejected, it ends REJECTED with an UNAUTHORIZED error
// whose message is the reason (seed 003's states: ESCALATED, then
// APPROVED and COMPLETED, or REJECTED).
//
// The escalation and the decision are written to the task's record (for
// a task recorded on disk: a detached one, one from a mailbox), so a
// provider that restarts keeps a detached task that awaits its decision
// ESCALATED, and its decision is then the answer. A task that is not
// decided by its deadline (a detached task's, 24 hours by default; the
// caller's timeout otherwise) ends REJECTED with TIMEOUT.

// maxEscalated bounds the tasks awaiting a decision on one provider;
// past it Escalate fails with RATE_LIMITED.
const maxEscalated = 1024

// ErrEscalated is returned by a handler (possibly wrapped) to leave its
// request's answer to the operator's decision on its escalation (see
// Call.Escalate; a handler that did not escalate is escalated with a
// generic reason).
var ErrEscalated = errors.New("node: the handler escalated its request; the operator's decision is its answer")

// errNoCallTask is what Escalate and Decision return for a call that runs
// without a task (a built-in capability).
var errNoCallTask = errors.New("node: this call has no task to escalate")

// errLeftEscalated stops the wait for a decision when the node closes:
// the task stays ESCALATED in its record, to be decided after a restart.
var errLeftEscalated = errors.New("node: closing; the task stays escalated")

// Escalate marks the call's task ESCALATED with reason, for the
// provider's operator to decide (Node.TaskResolve); it returns at once.
// Learn the decision with Decision, or return ErrEscalated to make the
// decision the answer. Escalating a task that is escalated already is a
// no-op; one that ended or was decided is an error, and so is a reason
// longer than protocol.MaxDecisionReason bytes or more than maxEscalated
// tasks awaiting a decision on this node (RATE_LIMITED).
func (c *Call) Escalate(reason string) error {
	if c.task == nil {
		return errNoCallTask
	}
	return c.task.escalate(reason)
}

// Decision waits for the operator's decision on the call's task, once
// Escalate was called, until ctx ends. An approved task is APPROVED again
// and the handler's answer is its answer; a rejected one stays ESCALATED
// until the handler returns: an error then ends it REJECTED.
func (c *Call) Decision(ctx context.Context) (protocol.TaskDecision, error) {
	if c.task == nil {
		return protocol.TaskDecision{}, errNoCallTask
	}
	t := c.task
	t.mu.Lock()
	ch := t.decided
	t.mu.Unlock()
	if ch == nil {
		return protocol.TaskDecision{}, errors.New("node: the call was not escalated")
	}
	select {
	case <-ch:
		t.mu.Lock()
		defer t.mu.Unlock()
		return *t.t.Decision, nil
	case <-ctx.Done():
		return protocol.TaskDecision{}, ctx.Err()
	}
}

// escalate moves t to ESCALATED with reason and records it.
func (t *task) escalate(reason string) error {
	if len(reason) > protocol.MaxDecisionReason {
		return protocol.Errorf(protocol.CodeInvalidMessage, "an escalation's reason is longer than %d bytes", protocol.MaxDecisionReason)
	}
	tt := t.tt
	tt.mu.Lock()
	t.mu.Lock()
	var err error
	switch {
	case t.t.State.Final():
		err = protocol.Errorf(protocol.CodeInvalidMessage, "task %s has ended (%s): it cannot be escalated", t.t.ID, t.t.State)
	case t.t.Decision != nil:
		err = protocol.Errorf(protocol.CodeInvalidMessage, "task %s was decided already: it cannot be escalated again", t.t.ID)
	case t.decided != nil:
		// Escalated already.
	case tt.escalated >= maxEscalated:
		err = protocol.Errorf(protocol.CodeRateLimited, "%d tasks await a decision here already, the limit", maxEscalated)
	default:
		tt.escalated++
		t.pending = true
		t.decided = make(chan struct{})
	}
	t.mu.Unlock()
	tt.mu.Unlock()
	if err != nil {
		return err
	}
	t.set(protocol.TaskEscalated, reason)
	tt.persist(t)
	return nil
}

// unpend ends t's wait for a decision (it finished, or its deadline
// passed): a later resolve is refused. It reports whether t was waiting.
func (tt *taskTable) unpend(t *task) bool {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.pending {
		return false
	}
	t.pending = false
	tt.escalated--
	return true
}

// resolve records the operator's decision on t, which must await one.
func (tt *taskTable) resolve(t *task, approve bool, reason string) error {
	tt.mu.Lock()
	t.mu.Lock()
	if !t.pending || t.t.State != protocol.TaskEscalated || t.t.Decision != nil {
		state, id := t.t.State, t.t.ID
		t.mu.Unlock()
		tt.mu.Unlock()
		return protocol.Errorf(protocol.CodeInvalidMessage, "task %s is %s, not ESCALATED awaiting a decision", id, state)
	}
	t.pending = false
	tt.escalated--
	t.t.Decision = &protocol.TaskDecision{Approved: approve, Reason: reason, At: tt.now().UTC()}
	ch := t.decided
	t.mu.Unlock()
	tt.mu.Unlock()
	if approve {
		t.set(protocol.TaskApproved, decisionNote(true, reason))
	}
	// On disk before anyone acts on it.
	tt.persist(t)
	close(ch)
	return nil
}

func decisionNote(approved bool, reason string) string {
	s := "rejected by the operator"
	if approved {
		s = "approved by the operator"
	}
	if reason != "" {
		s += ": " + reason
	}
	return s
}

// decisionResult is the answer of an approved task whose handler left
// the answer to the decision.
type decisionResult struct {
	Approved bool   `json:"approved"`
	Reason   string `json:"reason"`
}

// decisionAnswer is the answer a decision makes.
func decisionAnswer(d protocol.TaskDecision) (json.RawMessage, error) {
	if d.Approved {
		return mustCanonical(decisionResult{Approved: true, Reason: d.Reason}), nil
	}
	return nil, protocol.Errorf(protocol.CodeUnauthorized, "%s", decisionNote(false, d.Reason)).
		WithDetails(map[string]any{"state": protocol.TaskRejected, "reason": d.Reason})
}

// awaitDecision waits for the decision on t, whose handler returned
// ErrEscalated, until ctx ends, and returns the answer it makes. park,
// when not nil, is called once the handler is done (a detached task gives
// back its running slot: it only waits now). It returns errLeftEscalated
// when the node closes first and t is on disk: it stays ESCALATED there.
func (n *Node) awaitDecision(ctx context.Context, t *task, park func()) (json.RawMessage, error) {
	t.mu.Lock()
	escalated := t.decided != nil
	t.mu.Unlock()
	if !escalated {
		if err := t.escalate("escalated by its handler"); err != nil {
			return nil, err
		}
	}
	t.mu.Lock()
	t.handedOff = true
	ch, id := t.decided, t.t.ID
	t.mu.Unlock()
	if park != nil {
		park()
	}
	select {
	case <-ch:
	case <-ctx.Done():
		if n.ctx.Err() != nil && t.recorded {
			return nil, errLeftEscalated
		}
		if n.tasks.unpend(t) {
			return nil, protocol.Errorf(protocol.CodeTimeout, "task %s was not decided before its deadline", id)
		}
		<-ch // decided meanwhile
	}
	t.mu.Lock()
	d := *t.t.Decision
	t.mu.Unlock()
	return decisionAnswer(d)
}

// TaskResolve records the decision of this node's operator on a task it
// serves that awaits one (ESCALATED): approve or reject, with a reason
// (at most protocol.MaxDecisionReason bytes). A task in any other state
// is an INVALID_MESSAGE error. The handler learns the decision
// (Call.Decision), or, if it left the answer to it, the decision is the
// answer: TaskResolve then waits (within ctx) for the task to end and
// returns it as it ended.
func (n *Node) TaskResolve(ctx context.Context, taskID string, approve bool, reason string) (*protocol.Task, error) {
	if taskID == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "a task id is required")
	}
	if len(reason) > protocol.MaxDecisionReason {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "a decision's reason is longer than %d bytes", protocol.MaxDecisionReason)
	}
	t, err := n.tasks.byID(ctx, taskID)
	if err != nil {
		return nil, err
	}
	if err := n.tasks.resolve(t, approve, reason); err != nil {
		return nil, err
	}
	t.mu.Lock()
	handed := t.handedOff
	t.mu.Unlock()
	if handed {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		select {
		case <-t.done:
		case <-wctx.Done():
		}
		cancel()
	}
	snap := t.snapshot()
	return &snap, nil
}

// byID finds a task this node serves by its task id (the id its
// requester uses): a running one in the table, or else a record (which
// has ended, or awaits nothing).
func (tt *taskTable) byID(ctx context.Context, id string) (*task, error) {
	tt.mu.Lock()
	var found []*task
	for _, t := range tt.m {
		t.mu.Lock()
		if t.t.ID == id {
			found = append(found, t)
		}
		t.mu.Unlock()
	}
	tt.mu.Unlock()
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
	default:
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "task id %s names %d tasks of different requesters here", id, len(found))
	}
	if tt.st != nil {
		if rec, err := tt.st.Task(ctx, id); err == nil && rec.Requester != submittedRequester {
			if d, err := decodeDiskTask(rec); err == nil {
				return nil, protocol.Errorf(protocol.CodeInvalidMessage, "task %s is %s, not ESCALATED awaiting a decision", id, d.Task.State)
			}
		}
	}
	return nil, protocol.Errorf(protocol.CodeInvalidMessage, "this agent serves no task %s", id)
}

// resumeEscalated keeps waiting, after a restart, for the decision on a
// detached task that awaited one when the node stopped (sweepTasks found
// it): the decision is its answer, sent to its requester.
func (n *Node) resumeEscalated(t *task) {
	ctx, cancel := context.WithDeadline(n.ctx, t.detachAt)
	t.cancel = cancel
	t.onFinal = n.deliverFinal
	t.decided = make(chan struct{})
	t.handedOff = true
	n.tasks.mu.Lock()
	if n.tasks.m[t.key] == nil {
		n.tasks.m[t.key] = t
		n.tasks.order = append(n.tasks.order, t.key)
	}
	n.tasks.escalated++
	t.pending = true
	n.tasks.mu.Unlock()
	if !n.goTracked(func() {
		defer cancel()
		res, err := n.awaitDecision(ctx, t, nil)
		if errors.Is(err, errLeftEscalated) {
			return
		}
		n.tasks.finish(t, res, err)
	}) {
		cancel()
	}
}
