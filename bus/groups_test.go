package bus

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
)

// groupConn is a connection of the queue group table tests that can end.
type groupConn struct {
	ctx    context.Context
	cancel context.CancelFunc
}

func newGroupConn() *groupConn {
	ctx, cancel := context.WithCancel(context.Background())
	return &groupConn{ctx: ctx, cancel: cancel}
}

func (*groupConn) Call(context.Context, string, any, any) error { return nil }
func (c *groupConn) Context() context.Context                   { return c.ctx }
func (*groupConn) AfterClose(func())                            {}

// member is a subscription of client id to pattern, in group ("" none).
func member(id, pattern, group string, prop Propagation) *subscription {
	return &subscription{conn: newGroupConn(), client: &client{id: id}, pattern: pattern, propagation: prop, group: group}
}

// enter adds subs to t as subscribe does: joined to their group, or added.
func enter(t *testing.T, tab *subTable, subs ...*subscription) {
	t.Helper()
	for _, s := range subs {
		if s.group != "" {
			if err := tab.join(s); err != nil {
				t.Fatalf("join %s %s %s: %v", s.client.id, s.pattern, s.group, err)
			}
		} else if !tab.add(s) {
			t.Fatalf("add %s %s refused", s.client.id, s.pattern)
		}
	}
}

// routeNames names a route: a client, or "group:G@P" for a group.
func routeNames(subs []*subscription) []string {
	var out []string
	for _, s := range subs {
		out = append(out, s.client.id)
	}
	return out
}

// TestGroupRouting pins where a queue group stands in the ordered table:
// as one subscription, where its newest member stands, shadowing and
// shadowed by the subscriptions to its pattern as one.
func TestGroupRouting(t *testing.T) {
	const p = PropagationStopOnProcessed
	tests := []struct {
		name  string
		subs  []*subscription
		topic string
		route []string
	}{
		{name: "members are one entry", topic: "job:1",
			subs:  []*subscription{member("a", "job:*", "w", p), member("b", "job:*", "w", p), member("c", "job:*", "w", p)},
			route: []string{"group:w@job:*"}},
		{name: "a plain subscription after the group shadows it", topic: "job:1",
			subs:  []*subscription{member("a", "job:*", "w", p), member("x", "job:*", "", p)},
			route: []string{"x"}},
		{name: "a member joining after a plain subscription shadows it", topic: "job:1",
			subs:  []*subscription{member("a", "job:*", "w", p), member("x", "job:*", "", p), member("b", "job:*", "w", p)},
			route: []string{"group:w@job:*"}},
		{name: "the newer of two groups on a pattern", topic: "job:1",
			subs:  []*subscription{member("a", "job:*", "v", p), member("b", "job:*", "w", p)},
			route: []string{"group:w@job:*"}},
		{name: "one name on two patterns is two groups, each in its place", topic: "job:1",
			subs:  []*subscription{member("a", "job:*", "w", p), member("x", "job:1", "", p), member("b", "job:", "w", p)},
			route: []string{"group:w@job:", "x", "group:w@job:*"}},
		{name: "no match", topic: "task:1",
			subs: []*subscription{member("a", "job:*", "w", p)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var tab subTable
			enter(t, &tab, tc.subs...)
			if got := routeNames(tab.route(tc.topic)); !slices.Equal(got, tc.route) {
				t.Errorf("route(%q) = %q, want %q", tc.topic, got, tc.route)
			}
		})
	}
}

// TestGroupPick: each message goes to the member with the fewest in
// flight, ties in turn; a member whose connection ended is skipped; a
// retry avoids the member it failed at while another is left.
func TestGroupPick(t *testing.T) {
	var tab subTable
	a, b, c := member("a", "job:*", "w", PropagationStopOnProcessed), member("b", "job:*", "w", PropagationStopOnProcessed), member("c", "job:*", "w", PropagationStopOnProcessed)
	enter(t, &tab, a, b, c)
	g := tab.route("job:1")[0].members
	pick := func(avoid string) string {
		s := g.pick(avoid)
		if s == nil {
			return ""
		}
		s.inflight.Add(-1)
		return s.client.id
	}
	var got []string
	for range 6 {
		got = append(got, pick(""))
	}
	if want := []string{"a", "b", "c", "a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("idle members picked %q, want in turn %q", got, want)
	}
	// a and b busy: c takes the next two, then a (one in flight) ties b.
	a.inflight.Add(1)
	b.inflight.Add(1)
	if s := g.pick(""); s != c {
		t.Errorf("picked %s, want c (least in flight)", s.client.id)
	}
	if s := g.pick(""); s != a {
		t.Errorf("picked %s, want a (a, b and c one in flight each: the turn goes on after c)", s.client.id)
	}
	a.inflight.Store(0)
	b.inflight.Store(0)
	c.inflight.Store(0)
	if got := pick("a"); got == "a" {
		t.Error("a retry went back to the member it failed at")
	}
	b.conn.(*groupConn).cancel()
	c.conn.(*groupConn).cancel()
	for range 3 {
		if got := pick(""); got != "a" {
			t.Errorf("picked %q with b and c gone, want a", got)
		}
	}
	if got := pick("a"); got != "a" {
		t.Errorf("picked %q, want a: the member a retry failed at when it is the only one left", got)
	}
	a.conn.(*groupConn).cancel()
	if got := pick(""); got != "" || g.live() {
		t.Errorf("picked %q from a group with no member connected", got)
	}
}

// TestGroupJoin: a member's policy must be the group's; the bounds hold;
// a connection subscribes once per pattern; the last member to leave
// ends the group.
func TestGroupJoin(t *testing.T) {
	var tab subTable
	first := member("a", "job:*", "w", PropagationContinueAll)
	enter(t, &tab, first)
	if err := tab.join(member("b", "job:*", "w", PropagationStopOnProcessed)); !errors.Is(err, errGroupPolicy) {
		t.Errorf("join with another policy: %v, want errGroupPolicy", err)
	}
	dup := member("a2", "job:*", "w", PropagationContinueAll)
	dup.conn = first.conn
	if err := tab.join(dup); !errors.Is(err, errAlreadySubscribed) {
		t.Errorf("second join of one connection: %v, want errAlreadySubscribed", err)
	}
	for i := 1; i < MaxGroupMembers; i++ {
		if err := tab.join(member("m", "job:*", "w", PropagationContinueAll)); err != nil {
			t.Fatalf("member %d: %v", i+1, err)
		}
	}
	if err := tab.join(member("m", "job:*", "w", PropagationContinueAll)); !errors.Is(err, errGroupBound) {
		t.Errorf("member %d: %v, want errGroupBound", MaxGroupMembers+1, err)
	}
	for i := 1; i < MaxGroupsPerPattern; i++ {
		if err := tab.join(member("g", "job:*", "g"+strconv.Itoa(i), PropagationContinueAll)); err != nil {
			t.Fatalf("group %d: %v", i+1, err)
		}
	}
	if err := tab.join(member("g", "job:*", "one too many", PropagationContinueAll)); !errors.Is(err, errGroupBound) {
		t.Errorf("group %d on a pattern: %v, want errGroupBound", MaxGroupsPerPattern+1, err)
	}
	if err := tab.join(member("g", "task:*", "one too many", PropagationContinueAll)); err != nil {
		t.Errorf("a group on another pattern: %v", err)
	}

	var small subTable
	x, y := member("x", "job:*", "w", PropagationStopOnProcessed), member("y", "job:*", "w", PropagationStopOnProcessed)
	enter(t, &small, x, y)
	small.remove(x)
	if small.group("job:*", "w") == nil {
		t.Fatal("the group ended with a member left")
	}
	small.remove(y)
	if small.group("job:*", "w") != nil || len(small.route("job:1")) != 0 {
		t.Error("the group outlived its last member")
	}
	// A new group of that name starts afresh, under its own policy.
	enter(t, &small, member("z", "job:*", "w", PropagationContinueAll))
}
