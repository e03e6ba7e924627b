package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// Durable tasks: a request that may be seen again after a restart (one
// taken from a mailbox, which a relay may serve again; a detached
// submission) is recorded in the node's store once its checks pass, by
// (requester, request id), and its record is updated with the final
// answer. A node that restarts answers a repeat from the record and never
// runs it again, whether the repeat comes from a mailbox or directly (a
// sender whose deposit's answer was lost delivers the message itself); a record still running when the node stopped ends FAILED,
// interrupted by a restart, unless its capability is idempotent and it
// was not re-offered before: then it runs once more (sweepTasks,
// Node.reoffer). Records are kept for the
// message TTL (WithMessageTTL, seven days) within store.TaskBounds.

// interruptedNote is the reason of a task that was running when its
// provider stopped.
const interruptedNote = "interrupted by a restart of its provider; it was not run again"

// diskTask is a task's record as the node encodes it (store.TaskRecord.Data).
type diskTask struct {
	Task   protocol.Task `json:"task"`
	Digest []byte        `json:"digest"` // of action and params (requestDigest)
	// What re-offering the task to its handler after a restart needs
	// (an idempotent capability's): the request's params, its detach
	// deadline (0: not detached) and whether it was re-offered already.
	Params    json.RawMessage `json:"params,omitempty"`
	Detach    time.Time       `json:"detach,omitzero"`
	Reoffered bool            `json:"reoffered,omitempty"`
}

// record writes t to the store for the first time, when its checks have
// passed and before its handler runs. A store at its bounds refuses the
// request, RATE_LIMITED, before anything ran.
func (tt *taskTable) record(ctx context.Context, t *task) error {
	t.mu.Lock()
	t.recID = store.NewID()
	t.t.ID, t.t.RequestID = t.recID, t.key.id
	t.mu.Unlock()
	rec, err := tt.diskRecord(t)
	if err != nil {
		return err
	}
	if err := tt.st.AddTask(ctx, rec, tt.bounds); err != nil {
		switch {
		case errors.Is(err, store.ErrFull):
			return protocol.Errorf(protocol.CodeRateLimited, "this agent keeps as many tasks as it may (%v); try again later", err)
		case errors.Is(err, store.ErrExists):
			// The same request recorded by a concurrent admission that lost
			// the memory race cannot happen (admit serialises on the key);
			// this is a record from before a restart that admit missed.
			return protocol.Errorf(protocol.CodeInvalidMessage, "request %s was already run here", t.key.id)
		default:
			return protocol.Errorf(protocol.CodeInternalError, "the task could not be recorded: %v", err)
		}
	}
	t.mu.Lock()
	t.recorded = true
	t.mu.Unlock()
	return nil
}

// diskRecord encodes t's record as it stands.
func (tt *taskTable) diskRecord(t *task) (store.TaskRecord, error) {
	snap := t.snapshot()
	t.mu.Lock()
	id, digest, params, detachAt, reoffered := t.recID, t.digest, t.params, t.detachAt, t.reoffered
	t.mu.Unlock()
	data, err := json.Marshal(diskTask{Task: snap, Digest: digest[:], Params: params, Detach: detachAt, Reoffered: reoffered})
	if err != nil {
		return store.TaskRecord{}, fmt.Errorf("node: encode task: %w", err)
	}
	return store.TaskRecord{ID: id, Requester: t.key.from.String(), RequestID: t.key.id, Final: snap.State.Final(),
		Expires: tt.now().Add(tt.ttl), Data: data}, nil
}

// persistFinal writes a recorded task's final state.
func (tt *taskTable) persistFinal(t *task) { tt.persist(t) }

// persist writes a recorded task's record as it stands (its final state,
// or an escalation and its decision). Writes of one task are ordered, and
// each encodes the state at its turn, so the last written is the latest.
func (tt *taskTable) persist(t *task) {
	t.mu.Lock()
	recorded := t.recorded
	t.mu.Unlock()
	if !recorded {
		return
	}
	t.diskMu.Lock()
	defer t.diskMu.Unlock()
	rec, err := tt.diskRecord(t)
	if err == nil {
		// The node's context may be ending: the answer is still written.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = tt.st.UpdateTask(ctx, rec)
		cancel()
	}
	if err != nil {
		tt.log.Error("task answer not recorded", "task", rec.ID, "requester", rec.Requester, "request_id", rec.RequestID, "err", err)
	}
}

// decodeDiskTask reads a record the node wrote.
func decodeDiskTask(rec store.TaskRecord) (diskTask, error) {
	var d diskTask
	if err := protocol.DecodeStrict(rec.Data, &d); err != nil {
		return d, fmt.Errorf("node: task record %s: %w", rec.ID, err)
	}
	if len(d.Digest) != len(requestDigest(&protocol.Request{})) {
		return d, fmt.Errorf("node: task record %s: digest of %d bytes", rec.ID, len(d.Digest))
	}
	return d, nil
}

// fromDisk finds the record of key in the store, and makes it a finished
// task of the table (one still running in the record was interrupted by
// a restart: sweepTasks ends those as the node starts). It returns nil
// when the store has no record of key.
func (tt *taskTable) fromDisk(ctx context.Context, key requestKey) (*task, error) {
	rec, err := tt.st.TaskByRequest(ctx, key.from.String(), key.id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "the task record could not be read: %v", err)
	}
	d, err := decodeDiskTask(rec)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "%v", err)
	}
	t := &task{now: tt.now, tt: tt, key: key, recID: rec.ID, recorded: true, cancel: func() {}, done: make(chan struct{}), t: d.Task}
	copy(t.digest[:], d.Digest)
	if !t.t.State.Final() {
		t.set(protocol.TaskFailed, interruptedNote)
		t.t.Error = protocol.Errorf(protocol.CodeInternalError, "request %s was %s", key.id, interruptedNote)
		tt.persistFinal(t)
	}
	t.res, t.err = finalAnswer(&t.t)
	close(t.done)
	return t, nil
}

// finalAnswer is the answer a finished task gives.
func finalAnswer(t *protocol.Task) (json.RawMessage, error) {
	switch {
	case t.State == protocol.TaskCompleted:
		return t.Result, nil
	case t.State == protocol.TaskCancelled:
		return nil, protocol.Errorf(protocol.CodeInternalError, "task %s was cancelled by its requester", t.ID)
	case t.Error != nil:
		e := *t.Error
		return nil, &e
	default:
		return nil, protocol.Errorf(protocol.CodeInternalError, "task %s ended %s", t.ID, t.State)
	}
}

// sweepTasks ends FAILED every recorded task that was still running when
// the node stopped: its handler's work is lost, and it is never run again
// on its own; but a task whose capability is idempotent (reoffer says so)
// and that was not re-offered before is returned, marked re-offered, to
// run once more (and only once: if it is interrupted again, it fails).
// It runs once, as the node starts.
//
// A detached task that awaited its operator's decision (ESCALATED,
// undecided, before its deadline) stays so: it is returned in escalated,
// and its decision will be its answer (Node.resumeEscalated). One that
// was rejected while its handler waited ends REJECTED, the rejection its
// answer.
func (tt *taskTable) sweepTasks(ctx context.Context, reoffer func(action string) bool) (again, escalated []*task, _ error) {
	var running []store.TaskRecord
	err := tt.st.Tasks(ctx, func(r store.TaskRecord) bool {
		if !r.Final {
			running = append(running, r)
		}
		return true
	})
	if err != nil {
		return nil, nil, fmt.Errorf("node: reading task records: %w", err)
	}
	for _, rec := range running {
		d, err := decodeDiskTask(rec)
		if err != nil {
			tt.log.Warn("task record unreadable", "task", rec.ID, "err", err)
			continue
		}
		from, ferr := parseRequester(rec.Requester)
		key := requestKey{from: from, id: rec.RequestID}
		t := &task{now: tt.now, tt: tt, key: key, recID: rec.ID, recorded: true, durable: true, t: d.Task,
			params: d.Params, detachAt: d.Detach, reoffered: d.Reoffered, done: make(chan struct{}), cancel: func() {}}
		copy(t.digest[:], d.Digest)
		if d.Task.State == protocol.TaskEscalated && ferr == nil {
			switch dec := d.Task.Decision; {
			case dec == nil && !d.Detach.IsZero() && d.Detach.After(tt.now()):
				tt.log.Info("task awaiting a decision kept across a restart", "task", rec.ID, "requester", rec.Requester, "request_id", rec.RequestID)
				escalated = append(escalated, t)
				continue
			case dec != nil && !dec.Approved:
				_, rerr := decisionAnswer(*dec)
				t.t.Error = protocol.AsError(rerr)
				t.set(protocol.TaskRejected, decisionNote(false, dec.Reason))
				rec.Final = true
				rec.Data, err = json.Marshal(diskTask{Task: t.t, Digest: d.Digest, Params: d.Params, Detach: d.Detach, Reoffered: d.Reoffered})
				if err == nil {
					err = tt.st.UpdateTask(ctx, rec)
				}
				if err != nil {
					return nil, nil, fmt.Errorf("node: ending rejected task %s: %w", rec.ID, err)
				}
				continue
			}
		}
		if ferr == nil && !d.Reoffered && reoffer(d.Task.Capability) && (d.Detach.IsZero() || d.Detach.After(tt.now())) {
			t.reoffered = true
			rec.Data, err = json.Marshal(diskTask{Task: t.t, Digest: d.Digest, Params: d.Params, Detach: d.Detach, Reoffered: true})
			if err == nil {
				err = tt.st.UpdateTask(ctx, rec)
			}
			if err != nil {
				return nil, nil, fmt.Errorf("node: re-offering interrupted task %s: %w", rec.ID, err)
			}
			tt.log.Warn("task interrupted by a restart offered again to its idempotent handler", "task", rec.ID, "requester", rec.Requester, "request_id", rec.RequestID)
			again = append(again, t)
			continue
		}
		t.set(protocol.TaskFailed, interruptedNote)
		t.t.Error = protocol.Errorf(protocol.CodeInternalError, "request %s was %s", rec.RequestID, interruptedNote)
		rec.Final = true
		rec.Data, err = json.Marshal(diskTask{Task: t.t, Digest: d.Digest, Params: d.Params, Detach: d.Detach, Reoffered: d.Reoffered})
		if err == nil {
			err = tt.st.UpdateTask(ctx, rec)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("node: ending interrupted task %s: %w", rec.ID, err)
		}
		tt.log.Warn("task interrupted by a restart ended FAILED", "task", rec.ID, "requester", rec.Requester, "request_id", rec.RequestID)
	}
	return again, escalated, nil
}

// parseRequester reads requester.String()'s form back.
func parseRequester(s string) (requester, error) {
	e, err := parseRequesterEntry(s)
	if err != nil || e.wild {
		return requester{}, fmt.Errorf("node: requester %q: %v", s, err)
	}
	return requester{agent: e.agent, client: e.client}, nil
}

// reoffer runs again, on a goroutine of the node's, a task that
// sweepTasks returned: under its request's deadline (a detached task's,
// or the handler timeout), then records its answer and, for a detached
// task, sends it to the requester.
func (n *Node) reoffer(t *task) {
	deadline := n.cfg.Limits.HandlerTimeout
	if !t.detachAt.IsZero() {
		deadline = time.Until(t.detachAt)
		t.onFinal = n.deliverFinal
	}
	ctx, cancel := context.WithTimeout(n.ctx, deadline)
	t.cancel = cancel
	req := &protocol.Request{Action: t.t.Capability, CorrelationID: t.key.id, Params: t.params}
	n.tasks.mu.Lock()
	if n.tasks.m[t.key] == nil {
		n.tasks.m[t.key] = t
		n.tasks.order = append(n.tasks.order, t.key)
	}
	n.tasks.mu.Unlock()
	if !n.goTracked(func() {
		defer cancel()
		res, err := n.execute(ctx, t, t.key.from, req, t.progress)
		n.tasks.finish(t, res, err)
	}) {
		cancel()
	}
}
