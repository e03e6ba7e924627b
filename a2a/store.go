package a2a

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// task is one A2A task the gateway runs: a mesh task on one agent.
type task struct {
	agent string
	// cancel ends the task's mesh call.
	cancel context.CancelFunc
	// done is closed when the task reaches a terminal state.
	done chan struct{}

	mu       sync.Mutex
	snap     Task
	updated  time.Time
	finished bool
	subs     map[chan StreamResponse]struct{}
}

func newTask(now time.Time, agent, id, contextID string, state TaskState, history []Message) *task {
	return &task{
		agent: agent, cancel: func() {}, done: make(chan struct{}),
		snap: Task{
			ID: id, ContextID: contextID,
			Status:  TaskStatus{State: state, Timestamp: stamp(now)},
			History: history,
		},
		updated: now,
		subs:    make(map[chan StreamResponse]struct{}),
	}
}

// snapshot returns a copy of the task as a client sees it, with at most
// historyLength messages of history (nil: all) and, unless artifacts, no
// artifacts.
func (t *task) snapshot(historyLength *int32, artifacts bool) Task {
	t.mu.Lock()
	defer t.mu.Unlock()
	return trim(t.snap, historyLength, artifacts)
}

func trim(s Task, historyLength *int32, artifacts bool) Task {
	s.History = slices.Clone(s.History)
	if historyLength != nil && int(*historyLength) < len(s.History) {
		s.History = s.History[len(s.History)-max(int(*historyLength), 0):]
	}
	if len(s.History) == 0 {
		s.History = nil
	}
	if !artifacts {
		s.Artifacts = nil
	}
	return s
}

// subscribe returns the task as it is and a channel of what follows, closed
// after the final event (or if the subscriber falls behind). If the task is
// already final the channel is nil.
func (t *task) subscribe() (Task, chan StreamResponse) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished {
		return trim(t.snap, nil, true), nil
	}
	ch := make(chan StreamResponse, maxSubscriberBacklog)
	t.subs[ch] = struct{}{}
	return trim(t.snap, nil, true), ch
}

func (t *task) unsubscribe(ch chan StreamResponse) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.subs[ch]; ok {
		delete(t.subs, ch)
		close(ch)
	}
}

// publishLocked sends ev to every subscriber, ending those that are full.
func (t *task) publishLocked(ev StreamResponse) {
	for ch := range t.subs {
		select {
		case ch <- ev:
		default:
			delete(t.subs, ch)
			close(ch)
		}
	}
}

// progress records a WORKING status carrying one mesh progress result.
func (t *task) progress(now time.Time, result json.RawMessage) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished {
		return
	}
	data := result
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	st := TaskStatus{
		State:     TaskStateWorking,
		Message:   &Message{MessageID: newID(), ContextID: t.snap.ContextID, TaskID: t.snap.ID, Role: RoleAgent, Parts: []Part{{Data: data}}},
		Timestamp: stamp(now),
	}
	t.snap.Status = st
	t.updated = now
	t.publishLocked(StreamResponse{StatusUpdate: &TaskStatusUpdateEvent{TaskID: t.snap.ID, ContextID: t.snap.ContextID, Status: st}})
}

// finish makes the task final, once: later calls do nothing and return
// false.
func (t *task) finish(now time.Time, st TaskStatus, artifacts []Artifact) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finished {
		return false
	}
	t.finished = true
	st.Timestamp = stamp(now)
	t.snap.Status = st
	t.snap.Artifacts = artifacts
	t.updated = now
	final := trim(t.snap, nil, true)
	t.publishLocked(StreamResponse{Task: &final})
	for ch := range t.subs {
		close(ch)
	}
	clear(t.subs)
	close(t.done)
	return true
}

// complete ends the task with the capability's result as an artifact.
func (t *task) complete(now time.Time, result json.RawMessage) {
	if len(result) == 0 {
		result = json.RawMessage("null")
	}
	t.finish(now, TaskStatus{State: TaskStateCompleted}, []Artifact{{ArtifactID: "result", Name: "result", Parts: []Part{{Data: result}}}})
}

// fail ends the task with the mesh error as "CODE: message" text and the
// error object as data.
func (t *task) fail(now time.Time, err error) {
	pe := protocol.AsError(err)
	text := string(pe.Code) + ": " + pe.Message
	data, _ := json.Marshal(pe)
	t.finish(now, TaskStatus{State: TaskStateFailed, Message: &Message{
		MessageID: newID(), ContextID: t.snap.ContextID, TaskID: t.snap.ID, Role: RoleAgent,
		Parts: []Part{{Text: &text}, {Data: data}},
	}}, nil)
}

// end makes the task final as its mesh task ended: rec is the mesh task's
// record and err its error (nil when it completed).
func (t *task) end(now time.Time, rec *protocol.SubmittedTask, err error) {
	switch {
	case err == nil:
		t.complete(now, rec.Result)
	case rec != nil && rec.State == protocol.TaskCancelled:
		t.finish(now, TaskStatus{State: TaskStateCanceled}, nil)
	default:
		t.fail(now, err)
	}
}

// taskStore is the gateway's bounded map of tasks: at most max tasks,
// finished ones forgotten after ttl or, oldest first, to make room.
type taskStore struct {
	max int
	ttl time.Duration

	mu    sync.Mutex
	tasks map[string]*task
	order []string // ids, oldest first
}

func newTaskStore(max int, ttl time.Duration) *taskStore {
	return &taskStore{max: max, ttl: ttl, tasks: make(map[string]*task)}
}

// add stores t, forgetting expired tasks and, if the store is full, the
// oldest finished one. If a task with id is stored already (two requests
// found the same mesh task at once) it returns that one. It returns nil if
// every task is still running.
func (s *taskStore) add(now time.Time, id string, t *task) *task {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.tasks[id]; ok {
		return old
	}
	s.order = slices.DeleteFunc(s.order, func(id string) bool {
		old := s.tasks[id]
		old.mu.Lock()
		expired := old.finished && now.Sub(old.updated) > s.ttl
		old.mu.Unlock()
		if expired {
			delete(s.tasks, id)
		}
		return expired
	})
	if len(s.tasks) >= s.max {
		i := slices.IndexFunc(s.order, func(id string) bool {
			old := s.tasks[id]
			old.mu.Lock()
			defer old.mu.Unlock()
			return old.finished
		})
		if i < 0 {
			return nil
		}
		delete(s.tasks, s.order[i])
		s.order = slices.Delete(s.order, i, i+1)
	}
	s.tasks[id] = t
	s.order = append(s.order, id)
	return t
}

// full reports whether a new task would find no room.
func (s *taskStore) full() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.tasks) < s.max {
		return false
	}
	for _, t := range s.tasks {
		t.mu.Lock()
		done := t.finished
		t.mu.Unlock()
		if done {
			return false
		}
	}
	return true
}

func (s *taskStore) get(id string) *task {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tasks[id]
}

// list returns the tasks of agent, newest first.
func (s *taskStore) list(agent string) []*task {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*task
	for i := len(s.order) - 1; i >= 0; i-- {
		if t := s.tasks[s.order[i]]; t.agent == agent {
			out = append(out, t)
		}
	}
	return out
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
