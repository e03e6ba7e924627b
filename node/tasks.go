package node

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// Bounds of the task tables.
const (
	// maxTasks bounds the tasks a provider remembers, and so the requests
	// whose retry gets the recorded answer instead of running again: the
	// oldest finished ones go first (running ones are kept; at most
	// Limits.MaxConcurrent of them run at once).
	maxTasks = 4096
	// maxTaskBytes bounds the results, errors and progress the finished
	// tasks keep, all tasks together; beyond it the oldest finished go.
	maxTaskBytes = 64 << 20
	// maxTaskProgress and maxTaskProgressBytes bound the progress results
	// kept per task (all are still sent to the requester).
	maxTaskProgress      = 64
	maxTaskProgressBytes = 64 << 10
)

// requestKey names a task on its provider: the verified requester (the
// signing agent and the client it vouches for, if any) and the request id
// (correlationId) it chose. Two requesters using the same request id make
// two tasks, and so do two clients an agent vouches for.
type requestKey struct {
	from requester
	id   string
}

// task is a request as its provider tracks it. It runs once; a retry of
// the same request (same requester and request id) while it runs waits
// for it, and one after it finished gets its recorded answer.
type task struct {
	now func() time.Time // the table's clock, for the history
	tt  *taskTable       // the table the task is in
	mu  sync.Mutex
	// diskMu orders the writes of the task's record, so that the last
	// one written is the latest state (persist).
	diskMu sync.Mutex
	// decided is made when the task is escalated and closed when its
	// operator decides (t.t.Decision is then set); handedOff is set when
	// its handler returned ErrEscalated, leaving the answer to the
	// decision (escalate.go).
	decided   chan struct{}
	handedOff bool
	// pending is set while the task awaits a decision (counted in the
	// table's escalated).
	pending bool
	t       protocol.Task
	key     requestKey
	digest  [sha256.Size]byte // of action and params: a retry is the same request
	// cancel cancels the context the task's handler runs under.
	cancel context.CancelFunc
	// cancelled is set when the requester cancelled the task.
	cancelled bool
	// durable is set for a task recorded in the store once its checks
	// pass (taskdisk.go); recorded once it is, under recID.
	durable  bool
	recorded bool
	recID    string
	// params, detach and reoffered go into a durable task's record (see
	// diskTask).
	params    json.RawMessage
	detachAt  time.Time
	reoffered bool
	// onAccepted is called once the task is recorded and approved, before
	// its handler runs; onFinal once it has its final answer (detach.go).
	onAccepted func(*task)
	onFinal    func(*task)
	// done is closed when the task finished; res and err are then its
	// final answer, as every requester of it gets it.
	done chan struct{}
	res  json.RawMessage
	err  error
	// size is the bytes the task keeps (result, error, progress).
	size          int
	progressBytes int
	// receivers get the task's progress: one per stream waiting for it, so
	// a stream that sent the request twice gets each progress once. A task
	// has one receiver but while a repeat waits: receiver0 is the array
	// of the first, so that attaching it allocates nothing.
	receivers []progressReceiver
	receiver0 [1]progressReceiver
	// history0 is the array of t.History, with room for a run's usual
	// states, validating, approved and completed: the task and its
	// history in one allocation.
	history0 [3]protocol.TaskEvent
}

type progressReceiver struct {
	key  any
	send func(json.RawMessage) error
	refs int
}

// finished reports whether the task has its final answer.
func (t *task) finished() bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// answer returns the task's final answer; call it once done is closed.
func (t *task) answer() (json.RawMessage, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.res, t.err
}

// attach makes send receive the task's further progress until detach is
// called with the same key. Attachments with the same key share one
// receiver, the first one's send.
func (t *task) attach(key any, send func(json.RawMessage) error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.receivers {
		if t.receivers[i].key == key {
			t.receivers[i].refs++
			return
		}
	}
	if t.receivers == nil {
		t.receivers = t.receiver0[:0]
	}
	t.receivers = append(t.receivers, progressReceiver{key: key, send: send, refs: 1})
}

// detach ends an attachment of key; the receiver goes with its last.
func (t *task) detach(key any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.receivers {
		if r := &t.receivers[i]; r.key == key {
			if r.refs--; r.refs == 0 {
				// Order does not matter (progress goes to each): the last
				// takes the place, and the vacated entry keeps nothing.
				last := len(t.receivers) - 1
				t.receivers[i] = t.receivers[last]
				t.receivers[last] = progressReceiver{}
				t.receivers = t.receivers[:last]
			}
			return
		}
	}
}

// progress keeps a progress result (canonical JSON) and sends it to every
// requester waiting for the task. It fails only when none received it.
func (t *task) progress(r json.RawMessage) error {
	t.mu.Lock()
	if len(t.t.Progress) < maxTaskProgress && t.progressBytes+len(r) <= maxTaskProgressBytes {
		t.t.Progress = append(t.t.Progress, r)
		t.progressBytes += len(r)
	}
	sends := make([]func(json.RawMessage) error, 0, len(t.receivers))
	for _, rc := range t.receivers {
		sends = append(sends, rc.send)
	}
	durable := t.durable
	t.mu.Unlock()
	if len(sends) == 0 && durable {
		// Kept for whoever asks (task.status, task wait): nobody follows
		// a detached task's stream.
		return nil
	}
	err := errNoReceiver
	for _, send := range sends {
		if e := send(r); e == nil {
			err = nil
		} else if err != nil {
			err = e
		}
	}
	return err
}

// set moves the task to state s, unless it is there already or final.
// It sends the move's event to the task event subscribers.
func (t *task) set(s protocol.TaskState, note string) {
	t.mu.Lock()
	if t.t.State.Final() || t.t.State == s {
		t.mu.Unlock()
		return
	}
	at := t.now().UTC()
	t.t.State = s
	t.t.History = append(t.t.History, protocol.TaskEvent{State: s, At: at, Note: note})
	var (
		subs []func(protocol.TaskChange)
		c    protocol.TaskChange
	)
	if ev := eventOf(s); ev != "" && t.tt != nil {
		if subs = t.tt.events.snapshot(); len(subs) > 0 {
			c = t.changeLocked(ev, note, at)
		}
	}
	t.mu.Unlock()
	for _, f := range subs {
		f(c)
	}
}

func (t *task) snapshot() protocol.Task {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.t
	c.History = slices.Clone(c.History)
	c.Progress = slices.Clone(c.Progress)
	return c
}

// taskTable holds the tasks a node runs as provider, under its own lock;
// each task has a lock of its own for its state and progress.
type taskTable struct {
	agent string // this node's id, the tasks' agent
	now   func() time.Time
	log   *slog.Logger

	// st keeps the durable tasks (nil: none are), for ttl, within bounds.
	st     *store.Store
	ttl    time.Duration
	bounds store.TaskBounds

	mu    sync.Mutex
	m     map[requestKey]*task
	order []requestKey // oldest first
	bytes int          // the sizes of the finished tasks in m
	// escalated counts the tasks awaiting a decision (maxEscalated).
	escalated int
	// events are the subscribers to the tasks' events (taskevents.go).
	events taskEvents
}

func newTaskTable(agent string, now func() time.Time) *taskTable {
	return &taskTable{agent: agent, now: now, log: slog.New(slog.DiscardHandler), m: map[requestKey]*task{}}
}

// requestDigest identifies what a request asks: its action and params
// (canonical JSON, as every verified request is).
func requestDigest(req *protocol.Request) [sha256.Size]byte {
	h := sha256.New()
	h.Write([]byte(req.Action))
	h.Write([]byte{0})
	h.Write(req.Params)
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}

// admit finds or starts the task of a request from a verified
// requester (fromStr is from.String()). When the requester already sent a request with this id (and
// the table still holds it), it returns that task and run false: the
// caller waits for its answer and must not run the request again. A
// different request under an id already used is refused. Otherwise it
// records a new task, about to be checked and run, and returns it with
// run true. cancel cancels the context the request would run under: the
// task's own cancel, for its requester's task.cancel, since the caller
// makes that context for this request alone (one context rather than
// its timeout's and another for the task). Any request the table does
// not hold is looked for in the store (a request taken from a mailbox
// may come again directly after a restart, from a sender whose deposit's
// answer was lost: it is answered from its record), and a durable
// request's task (one that may come again after a restart) is recorded
// there once its checks pass (taskdisk.go).
func (tt *taskTable) admit(ctx context.Context, cancel context.CancelFunc, from requester, fromStr string, req *protocol.Request, durable bool) (_ *task, run bool, _ error) {
	key := requestKey{from: from, id: req.CorrelationID}
	digest := requestDigest(req)
	durable = durable && tt.st != nil
	var disk *task
	if tt.st != nil && req.CorrelationID != "" {
		tt.mu.Lock()
		_, inMemory := tt.m[key]
		tt.mu.Unlock()
		if !inMemory {
			var err error
			if disk, err = tt.fromDisk(ctx, key); err != nil {
				if durable {
					return nil, false, err
				}
				// A live request is not refused for a record that could
				// not be read: it runs, as it did before records.
				disk = nil
			}
		}
	}
	tt.mu.Lock()
	old := tt.m[key]
	if old == nil && disk != nil {
		// Run before a restart: it is answered from its record.
		old = disk
		tt.m[key] = disk
		tt.order = append(tt.order, key)
		disk.size = len(disk.res)
		tt.bytes += disk.size
		tt.evictLocked()
	}
	if old != nil {
		tt.mu.Unlock()
		if old.digest != digest {
			return nil, false, protocol.Errorf(protocol.CodeInvalidMessage,
				"request id %s was already used by this requester for another request; a retry must repeat the request exactly, and a new request needs a new id", req.CorrelationID)
		}
		return old, false, nil
	}
	t := &task{now: tt.now, tt: tt, key: key, digest: digest, cancel: cancel, done: make(chan struct{}), durable: durable, params: req.Params,
		t: protocol.Task{ID: req.CorrelationID, Agent: tt.agent, Requester: fromStr, Capability: req.Action}}
	t.t.History = t.history0[:0]
	t.set(protocol.TaskValidating, "")
	tt.m[key] = t
	tt.order = append(tt.order, key)
	tt.evictLocked()
	tt.mu.Unlock()
	return t, true, nil
}

// evictLocked forgets the oldest finished tasks while the table holds
// more than maxTasks tasks or maxTaskBytes bytes. Running tasks stay.
func (tt *taskTable) evictLocked() {
	for len(tt.m) > maxTasks || tt.bytes > maxTaskBytes {
		i := slices.IndexFunc(tt.order, func(k requestKey) bool { return tt.m[k].finished() })
		if i < 0 {
			return
		}
		t := tt.m[tt.order[i]]
		tt.bytes -= t.size
		delete(tt.m, tt.order[i])
		if i == 0 {
			// The usual case, the oldest task done: dropping the head by
			// reslicing keeps a full table's admit O(1) rather than a
			// memmove of every key; append reallocates the array in time.
			tt.order[0] = requestKey{}
			tt.order = tt.order[1:]
		} else {
			tt.order = slices.Delete(tt.order, i, i+1)
		}
	}
}

// finish records how a request ended; the answer it records (the task's
// answer) is the one every requester of the task gets.
func (tt *taskTable) finish(t *task, res json.RawMessage, err error) {
	defer t.cancel()
	tt.unpend(t)
	t.mu.Lock()
	state := t.t.State
	cancelled := t.cancelled
	t.mu.Unlock()
	switch {
	case err == nil:
		t.mu.Lock()
		t.t.Result = res
		t.mu.Unlock()
		t.set(protocol.TaskCompleted, "")
	case cancelled:
		t.set(protocol.TaskCancelled, "cancelled by the requester")
	case state == protocol.TaskValidating || state == protocol.TaskEscalated:
		// Seed 003: an escalated request is decided by a human, approved or
		// rejected; a handler's error there is that rejection, not a fault.
		t.mu.Lock()
		t.t.Error = protocol.AsError(err)
		t.mu.Unlock()
		t.set(protocol.TaskRejected, protocol.AsError(err).Message)
	default:
		t.mu.Lock()
		t.t.Error = protocol.AsError(err)
		t.mu.Unlock()
		t.set(protocol.TaskFailed, protocol.AsError(err).Message)
	}
	t.mu.Lock()
	if t.t.State == protocol.TaskCancelled {
		res, err = nil, protocol.Errorf(protocol.CodeInternalError, "task %s was cancelled by its requester", t.key.id)
	}
	t.res, t.err = res, err
	t.size = len(res) + t.progressBytes
	if err != nil {
		pe := protocol.AsError(err)
		t.size += len(pe.Message) + len(pe.Details)
	}
	size := t.size
	t.mu.Unlock()
	// The record is final before anyone gets the answer.
	tt.persistFinal(t)
	close(t.done)
	if t.onFinal != nil && t.recorded {
		t.onFinal(t)
	}
	tt.mu.Lock()
	if tt.m[t.key] == t {
		if notStarted(state, err) {
			// Nothing here served the capability: the request never
			// started, and a repeat once a handler is attached (an agent
			// whose program reconnects, a message waiting in an outbox or
			// a mailbox) must run it, not get this refusal again.
			tt.forgetLocked(t.key)
		} else {
			tt.bytes += size
			tt.evictLocked()
		}
	}
	tt.mu.Unlock()
}

// notStarted reports whether a task that ended in state with err was
// refused for want of a handler before anything ran.
func notStarted(state protocol.TaskState, err error) bool {
	return state == protocol.TaskValidating && protocol.CodeOf(err) == protocol.CodeCapabilityNotSupported
}

// forgetLocked drops the task of key from the table; its size was never
// counted in tt.bytes.
func (tt *taskTable) forgetLocked(key requestKey) {
	delete(tt.m, key)
	if i := slices.Index(tt.order, key); i >= 0 {
		tt.order = slices.Delete(tt.order, i, i+1)
	}
}

// taskRequest serves task.status and task.cancel for the requester of a
// task.
func (n *Node) taskRequest(from requester, req *protocol.Request) (json.RawMessage, error) {
	var ref protocol.TaskRef
	if err := protocol.DecodePayload(req.Params, req.Action+" params", &ref); err != nil {
		return nil, err
	}
	if ref.TaskID == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, `%s takes {"task_id"}`, req.Action)
	}
	t, err := n.tasks.lookupAny(n.ctx, from, ref.TaskID)
	if err != nil {
		return nil, err
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

// lookup finds the task id of requester from. A requester sees only its
// own tasks: another's under the same id is not there for it. An agent
// asking for itself also sees the tasks of the clients it vouches for
// (it signed their requests), when the id names one of them only.
func (tt *taskTable) lookup(from requester, id string) (*task, error) {
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if t := tt.m[requestKey{from: from, id: id}]; t != nil {
		return t, nil
	}
	if from.client == "" {
		var found []*task
		for k, t := range tt.m {
			if k.id == id && k.from.agent == from.agent {
				found = append(found, t)
			}
		}
		switch len(found) {
		case 1:
			return found[0], nil
		case 0:
		default:
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "task id %s names tasks of %d of the clients you vouch for; ask on behalf of one", id, len(found))
		}
	}
	return nil, errNoTask(id)
}

func errNoTask(id string) error {
	return protocol.Errorf(protocol.CodeInvalidMessage, "no task %s of yours here (unknown, or forgotten)", id)
}

// lookupAny is lookup, then the store's records: a task recorded before
// a restart is still its requester's to read.
func (tt *taskTable) lookupAny(ctx context.Context, from requester, id string) (*task, error) {
	t, err := tt.lookup(from, id)
	if err == nil || tt.st == nil {
		return t, err
	}
	key := requestKey{from: from, id: id}
	if rec, rerr := tt.st.Task(ctx, id); rerr == nil {
		// A provider's task id: the requester's only (no id oracle).
		if rec.Requester != from.String() {
			return nil, err
		}
		key.id = rec.RequestID
		tt.mu.Lock()
		t := tt.m[key]
		tt.mu.Unlock()
		if t != nil {
			return t, nil
		}
	}
	disk, derr := tt.fromDisk(ctx, key)
	if derr != nil {
		return nil, derr
	}
	if disk == nil {
		return nil, err
	}
	tt.mu.Lock()
	defer tt.mu.Unlock()
	if old := tt.m[key]; old != nil {
		return old, nil
	}
	tt.m[key] = disk
	tt.order = append(tt.order, key)
	disk.size = len(disk.res)
	tt.bytes += disk.size
	tt.evictLocked()
	return disk, nil
}
