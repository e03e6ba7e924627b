package node

import (
	"sync"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// maxTaskEventSubscribers bounds the SubscribeTaskEvents subscriptions of
// a node.
const maxTaskEventSubscribers = 256

// taskEvents are the subscribers to the task table's events, copied on
// write so that an event reads them without a lock held for long.
type taskEvents struct {
	mu   sync.Mutex
	next int
	subs map[int]func(protocol.TaskChange)
	list []func(protocol.TaskChange)
}

func (te *taskEvents) snapshot() []func(protocol.TaskChange) {
	te.mu.Lock()
	defer te.mu.Unlock()
	return te.list
}

// eventOf names the event of a move to state s ("" for none).
func eventOf(s protocol.TaskState) string {
	switch s {
	case protocol.TaskApproved:
		return protocol.EventRequestApproved
	case protocol.TaskEscalated:
		return protocol.EventRequestEscalated
	case protocol.TaskRejected:
		return protocol.EventRequestRejected
	case protocol.TaskCompleted:
		return protocol.EventRequestCompleted
	case protocol.TaskFailed:
		return protocol.EventRequestFailed
	case protocol.TaskCancelled:
		return protocol.EventRequestCancelled
	}
	return ""
}

// changeLocked is the event of t, which the caller holds locked.
func (t *task) changeLocked(event, reason string, at time.Time) protocol.TaskChange {
	return protocol.TaskChange{Event: event, TaskID: t.t.ID, RequestID: t.key.id, Requester: t.t.Requester,
		Capability: t.t.Capability, State: t.t.State, Reason: reason, At: at}
}

// emit sends event of t to the subscribers, if any.
func (t *task) emit(event, reason string) {
	if t.tt == nil {
		return
	}
	subs := t.tt.events.snapshot()
	if len(subs) == 0 {
		return
	}
	t.mu.Lock()
	c := t.changeLocked(event, reason, t.now().UTC())
	t.mu.Unlock()
	for _, f := range subs {
		f(c)
	}
}

// SubscribeTaskEvents calls fn for each event of a task this node serves
// (protocol.EventRequestSubmitted and the others), in the order of each
// task's changes, until cancel is called. fn runs on the goroutine that
// changed the task and must not block or call the node. At most 256
// subscriptions at once; past that it is an error.
func (n *Node) SubscribeTaskEvents(fn func(protocol.TaskChange)) (cancel func(), err error) {
	te := &n.tasks.events
	te.mu.Lock()
	defer te.mu.Unlock()
	if len(te.subs) >= maxTaskEventSubscribers {
		return nil, protocol.Errorf(protocol.CodeRateLimited, "%d task event subscriptions already, the limit", maxTaskEventSubscribers)
	}
	if te.subs == nil {
		te.subs = map[int]func(protocol.TaskChange){}
	}
	te.next++
	id := te.next
	te.subs[id] = fn
	te.relistLocked()
	var once sync.Once
	return func() {
		once.Do(func() {
			te.mu.Lock()
			defer te.mu.Unlock()
			delete(te.subs, id)
			te.relistLocked()
		})
	}, nil
}

func (te *taskEvents) relistLocked() {
	list := make([]func(protocol.TaskChange), 0, len(te.subs))
	for _, f := range te.subs {
		list = append(list, f)
	}
	te.list = list
}
