package bus

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/meshagent/meshagent/protocol"
)

// subscription is one entry of the bus's subscription table.
type subscription struct {
	conn        conn
	client      *client
	pattern     string
	propagation Propagation
	// defaultOnly marks a default handler: it gets the messages on topics
	// matching pattern that nothing else routes (seed 001).
	defaultOnly bool
	// group names the queue group the subscription is a member of ("":
	// none); queue is that group.
	group string
	queue *queueGroup
	// members is set on a group's routing entry only (queueGroup.entry):
	// deliver gives the message to one of them.
	members *queueGroup
	// inflight counts the deliveries to a member under way, for picks.
	inflight atomic.Int64
}

// subTable is the bus's subscriptions in the order they were made, under a
// lock of its own that is never held while calling out (a client, the
// mesh, the store). Seed 001's rules live here:
//
//   - a topic goes to the subscriptions whose pattern matches it, newest
//     first ("later subscriptions take precedence");
//   - a newer subscription to a pattern shadows the older ones to the same
//     pattern, whichever connection made them;
//   - a default handler gets nothing routed, and only the newest default
//     handler matching a topic is asked for it;
//   - unsubscribe removes the oldest of a connection's equal subscriptions
//     (first in, first out);
//   - the members of a queue group on a pattern are routed as one
//     subscription, where the newest member stands (see groups.go).
type subTable struct {
	mu     sync.RWMutex
	subs   []*subscription // oldest first
	groups map[groupKey]*queueGroup
}

// add appends sub, unless its connection already holds a subscription to
// the same pattern of the same kind: then it returns false.
func (t *subTable) add(sub *subscription) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.findLocked(sub.conn, sub.pattern, sub.defaultOnly) != nil {
		return false
	}
	t.subs = append(t.subs, sub)
	return true
}

// join appends sub, a member of queue group sub.group, to the table and
// to its group, which it creates when it is the first member. It refuses
// (with the error to answer) a connection that already holds a
// subscription to the pattern, a policy other than the group's, and a
// group or a pattern past its bound.
func (t *subTable) join(sub *subscription) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.findLocked(sub.conn, sub.pattern, sub.defaultOnly) != nil {
		return errAlreadySubscribed
	}
	key := groupKey{sub.pattern, sub.group}
	g := t.groups[key]
	if g == nil {
		n := 0
		for k := range t.groups {
			if k.pattern == sub.pattern {
				n++
			}
		}
		if n >= MaxGroupsPerPattern {
			return fmt.Errorf("%w: %d queue groups subscribe to %q already, the most allowed", errGroupBound, n, sub.pattern)
		}
		g = newQueueGroup(key, sub.propagation)
		if t.groups == nil {
			t.groups = map[groupKey]*queueGroup{}
		}
		t.groups[key] = g
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.propagation != sub.propagation:
		return fmt.Errorf("%w: queue group %q on %q delivers under policy %s; a member cannot ask for %s", errGroupPolicy, sub.group, sub.pattern, g.propagation, sub.propagation)
	case len(g.members) >= MaxGroupMembers:
		return fmt.Errorf("%w: queue group %q on %q has %d members, the most allowed", errGroupBound, sub.group, sub.pattern, len(g.members))
	}
	sub.queue = g
	g.members = append(g.members, sub)
	t.subs = append(t.subs, sub)
	return nil
}

// group returns the routing entry of a queue group, or nil when it has no
// member.
func (t *subTable) group(pattern, name string) *subscription {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if g := t.groups[groupKey{pattern, name}]; g != nil {
		return g.entry
	}
	return nil
}

// find returns the oldest subscription of conn to pattern of the given
// kind, or nil.
func (t *subTable) find(conn conn, pattern string, defaultOnly bool) *subscription {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.findLocked(conn, pattern, defaultOnly)
}

func (t *subTable) findLocked(conn conn, pattern string, defaultOnly bool) *subscription {
	for _, s := range t.subs {
		if s.conn == conn && s.pattern == pattern && s.defaultOnly == defaultOnly {
			return s
		}
	}
	return nil
}

// remove takes sub out of the table and reports whether it was there.
func (t *subTable) remove(sub *subscription) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := slices.Index(t.subs, sub)
	if i < 0 {
		return false
	}
	t.subs = slices.Delete(t.subs, i, i+1)
	if g := sub.queue; g != nil {
		g.mu.Lock()
		g.members = slices.DeleteFunc(g.members, func(m *subscription) bool { return m == sub })
		empty := len(g.members) == 0
		g.mu.Unlock()
		if empty {
			delete(t.groups, g.key)
		}
	}
	return true
}

// clear empties the table and returns what it held.
func (t *subTable) clear() []*subscription {
	t.mu.Lock()
	defer t.mu.Unlock()
	subs := t.subs
	t.subs, t.groups = nil, nil
	return subs
}

// routeCap is the capacity route starts its result with, and routeScan
// the most routed patterns it checks for shadowing by a linear scan
// before it keeps them in a map (BenchmarkRoute).
const (
	routeCap  = 16
	routeScan = 32
)

// route returns the subscriptions a topic goes to, newest first, without
// default handlers and without the subscriptions shadowed by a newer one
// to the same pattern. A queue group is routed as its entry, where its
// newest member stands.
func (t *subTable) route(topic string) []*subscription {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []*subscription
	var seen map[string]bool // patterns routed, once out is long
	for i := len(t.subs) - 1; i >= 0; i-- {
		s := t.subs[i]
		if s.defaultOnly || !protocol.MatchTopic(s.pattern, topic) || shadowed(out, seen, s.pattern) {
			continue
		}
		if s.queue != nil {
			s = s.queue.entry
		}
		if out == nil {
			// One allocation for a common fan-out, not one per doubling;
			// t.subs[:i+1] holds every candidate left.
			out = make([]*subscription, 0, min(i+1, routeCap))
		}
		out = append(out, s)
		switch {
		case seen != nil:
			seen[s.pattern] = true
		case len(out) > routeScan: // a linear scan no longer pays
			seen = make(map[string]bool, 2*len(out))
			for _, o := range out {
				seen[o.pattern] = true
			}
		}
	}
	return out
}

// shadowed reports whether a newer subscription to pattern is routed
// already: in seen once there is one, else in out.
func shadowed(out []*subscription, seen map[string]bool, pattern string) bool {
	if seen != nil {
		return seen[pattern]
	}
	return slices.ContainsFunc(out, func(s *subscription) bool { return s.pattern == pattern })
}

// defaultHandler returns the newest default handler for a topic, or nil.
func (t *subTable) defaultHandler(topic string) *subscription {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for i := len(t.subs) - 1; i >= 0; i-- {
		if s := t.subs[i]; s.defaultOnly && protocol.MatchTopic(s.pattern, topic) {
			return s
		}
	}
	return nil
}

// of returns the newest subscription of a client matching topic, for a
// retry addressed to that client, or nil when the client holds none.
func (t *subTable) of(clientID, topic string) *subscription {
	t.mu.RLock()
	defer t.mu.RUnlock()
	for i := len(t.subs) - 1; i >= 0; i-- {
		s := t.subs[i]
		if s.client.id == clientID && protocol.MatchTopic(s.pattern, topic) {
			return s
		}
	}
	return nil
}

// patterns returns the distinct patterns subscribed to, sorted, and the
// number of subscriptions.
func (t *subTable) patterns() ([]string, int) {
	t.mu.RLock()
	out := make([]string, 0, len(t.subs))
	for _, s := range t.subs {
		out = append(out, s.pattern)
	}
	t.mu.RUnlock()
	n := len(out)
	slices.Sort(out)
	return slices.Compact(out), n
}
