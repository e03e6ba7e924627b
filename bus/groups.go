package bus

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// Queue groups are an extension of seed 001 taken from NATS: the
// subscriptions of one group to one pattern share its messages, each going
// to one member, so that a subscriber is scaled by adding members. In the
// ordered table the group stands where its newest member stands, as one
// subscription, and shadows or is shadowed as one.

// Bounds of queue groups, so that one client cannot grow the table
// without limit.
const (
	// MaxGroupMembers bounds the members of one group on one pattern.
	MaxGroupMembers = 256
	// MaxGroupsPerPattern bounds the groups subscribed to one pattern.
	MaxGroupsPerPattern = 64
	// MaxGroupLen bounds a group name, in bytes.
	MaxGroupLen = 256
)

// groupKey names a group: the same name on two patterns is two groups.
type groupKey struct{ pattern, name string }

// queueGroup is the member set of one group on one pattern. Its lock
// guards members and next; the table's lock, when both are held, is
// taken first.
type queueGroup struct {
	key         groupKey
	propagation Propagation
	// entry is what route returns for the group: deliver picks one
	// member for it.
	entry *subscription

	mu      sync.Mutex
	members []*subscription // oldest first
	next    int             // where the round-robin among ties starts
}

func newQueueGroup(key groupKey, prop Propagation) *queueGroup {
	g := &queueGroup{key: key, propagation: prop}
	g.entry = &subscription{client: &client{id: g.address()}, pattern: key.pattern, propagation: prop, group: key.name, members: g}
	return g
}

// address is what a retry of the group is addressed to in the outbox
// (store.Message.To): readable in the dead-letter list, and woken when a
// member subscribes.
func (g *queueGroup) address() string { return "group:" + g.key.name + "@" + g.key.pattern }

// pick chooses the member a message goes to and counts it in flight (the
// caller calls done): the least in flight, ties taken in turn; a member
// whose connection has ended is skipped, and avoid (the member a retry
// failed at) is taken only when no other is left. It returns nil when the
// group has no live member.
func (g *queueGroup) pick(avoid string) *subscription {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(g.members)
	best, at := (*subscription)(nil), 0
	better := func(s *subscription) bool {
		if best == nil {
			return true
		}
		if sa, ba := s.client.id == avoid, best.client.id == avoid; sa != ba {
			return ba
		}
		return s.inflight.Load() < best.inflight.Load()
	}
	for i := range n {
		j := (g.next + i) % n
		s := g.members[j]
		if s.conn.Context().Err() != nil {
			continue
		}
		if better(s) {
			best, at = s, j
		}
	}
	if best == nil {
		return nil
	}
	g.next = at + 1
	best.inflight.Add(1)
	return best
}

// live reports whether a member of the group is connected.
func (g *queueGroup) live() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.members {
		if s.conn.Context().Err() == nil {
			return true
		}
	}
	return false
}

// groupMeta is the metadata of a group's retry in the outbox: which group
// it is for, and the member it failed at.
type groupMeta struct {
	Group   string `json:"queueGroup"`
	Pattern string `json:"pattern"`
	Avoid   string `json:"avoid,omitempty"`
}

// retryMeta is the outbox metadata of a retry that failed at member.
func (g *queueGroup) retryMeta(member string) json.RawMessage {
	b, _ := json.Marshal(groupMeta{Group: g.key.name, Pattern: g.key.pattern, Avoid: member})
	return b
}

// groupOf reads the group a retry is for from its outbox metadata.
func groupOf(m store.Message) (groupMeta, bool) {
	if len(m.Metadata) == 0 || !strings.Contains(string(m.Metadata), `"queueGroup"`) {
		return groupMeta{}, false
	}
	var gm groupMeta
	if json.Unmarshal(m.Metadata, &gm) != nil || gm.Group == "" {
		return groupMeta{}, false
	}
	return gm, true
}

// deliverToGroup delivers msg to one member of the group whose routing
// entry is entry. The attempt names the member, and the group (via) so
// that a retry goes to the group again, thus to another member when this
// one has left.
func (b *Bus) deliverToGroup(ctx context.Context, entry *subscription, msg store.Message, params any) attempt {
	g := entry.members
	gm, _ := groupOf(msg)
	m := g.pick(gm.Avoid)
	if m == nil {
		return attempt{sub: entry, via: g, err: errNoMember}
	}
	defer m.inflight.Add(-1)
	a := b.deliver(ctx, m, msg, params)
	a.via = g
	return a
}

// groupError words a malformed "group" member.
func groupError() error {
	return rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "group" must be a non-empty string of at most %d bytes without NUL`, MaxGroupLen)
}

// checkGroup checks a "group" member that was given.
func checkGroup(group *string) error {
	if group != nil && (*group == "" || len(*group) > MaxGroupLen || strings.ContainsRune(*group, 0)) {
		return groupError()
	}
	return nil
}
