package bus

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// tableConn is a connection of the subscription table tests.
type tableConn struct{ name string }

func (*tableConn) Call(context.Context, string, any, any) error { return nil }
func (*tableConn) Context() context.Context                     { return context.Background() }
func (*tableConn) AfterClose(func())                            {}

// TestSubTable pins seed 001's routing rules on the table alone: newest
// first, shadowing by a newer subscription to the same pattern, default
// handlers apart, first-in-first-out unsubscribe.
func TestSubTable(t *testing.T) {
	a, b := &tableConn{"a"}, &tableConn{"b"}
	ca, cb := &client{id: "a"}, &client{id: "b"}
	sub := func(c *tableConn, pattern string, dflt bool) *subscription {
		bc := ca
		if c == b {
			bc = cb
		}
		return &subscription{conn: c, client: bc, pattern: pattern, propagation: PropagationStopOnProcessed, defaultOnly: dflt}
	}
	names := func(subs []*subscription) []string {
		var out []string
		for _, s := range subs {
			out = append(out, s.client.id+" "+s.pattern)
		}
		return out
	}
	tests := []struct {
		name  string
		subs  []*subscription
		topic string
		route []string
		dflt  string // client and pattern of the default handler, or ""
	}{
		{name: "empty", topic: "job:1"},
		{name: "newest first", subs: []*subscription{sub(a, "job:*", false), sub(b, "job:1", false)},
			topic: "job:1", route: []string{"b job:1", "a job:*"}},
		{name: "no match", subs: []*subscription{sub(a, "job:*", false)}, topic: "task:1"},
		{name: "newer shadows older on the same pattern", subs: []*subscription{sub(a, "job:*", false), sub(b, "job:*", false)},
			topic: "job:1", route: []string{"b job:*"}},
		{name: "default handlers are not routed", subs: []*subscription{sub(a, "job:*", true), sub(b, "job:1", false)},
			topic: "job:1", route: []string{"b job:1"}, dflt: "a job:*"},
		{name: "newest default handler", subs: []*subscription{sub(a, "job:*", true), sub(b, "job:*", true)},
			topic: "job:2", dflt: "b job:*"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var tab subTable
			for _, s := range tc.subs {
				if !tab.add(s) {
					t.Fatalf("add %s %s refused", s.client.id, s.pattern)
				}
			}
			if got := names(tab.route(tc.topic)); !slices.Equal(got, tc.route) {
				t.Errorf("route(%q) = %q, want %q", tc.topic, got, tc.route)
			}
			var got string
			if d := tab.defaultHandler(tc.topic); d != nil {
				got = d.client.id + " " + d.pattern
			}
			if got != tc.dflt {
				t.Errorf("defaultHandler(%q) = %q, want %q", tc.topic, got, tc.dflt)
			}
		})
	}
}

func TestSubTableAddFindRemove(t *testing.T) {
	var tab subTable
	a := &tableConn{"a"}
	ca := &client{id: "a"}
	s1 := &subscription{conn: a, client: ca, pattern: "job:*"}
	d1 := &subscription{conn: a, client: ca, pattern: "job:*", defaultOnly: true}
	if !tab.add(s1) || !tab.add(d1) {
		t.Fatal("a subscription and a default handler on one pattern are two entries")
	}
	if tab.add(&subscription{conn: a, client: ca, pattern: "job:*"}) {
		t.Error("a second equal subscription of one connection was added")
	}
	if got := tab.find(a, "job:*", true); got != d1 {
		t.Errorf("find default = %p, want %p", got, d1)
	}
	if got := tab.of("a", "job:7"); got != d1 {
		t.Errorf("of(a) = %+v, want the newest of the client's subscriptions", got)
	}
	if pats, n := tab.patterns(); !slices.Equal(pats, []string{"job:*"}) || n != 2 {
		t.Errorf("patterns = %q, %d", pats, n)
	}
	if !tab.remove(s1) || tab.remove(s1) {
		t.Error("remove: want true once, then false")
	}
	if tab.find(a, "job:*", false) != nil || len(tab.route("job:1")) != 0 {
		t.Error("a removed subscription is still found")
	}
	if got := tab.clear(); len(got) != 1 || got[0] != d1 {
		t.Errorf("clear returned %d subscriptions", len(got))
	}
}

// TestSubTableManyPatterns crosses the point where route stops scanning
// what it routed and keeps a set of the patterns instead.
func TestSubTableManyPatterns(t *testing.T) {
	// Each a pattern of its own that "job:aaa…" matches, past routeScan.
	n := routeScan + 8
	patterns := []string{"*", "j*", "jo*", "job*", "*a", "?ob:a*", "j?b:*a"}
	for k := range n {
		patterns = append(patterns, "job:"+strings.Repeat("?", k)+"*")
	}
	topic := "job:" + strings.Repeat("a", n)
	var tab subTable
	x, y := &tableConn{"x"}, &tableConn{"y"}
	cx, cy := &client{id: "x"}, &client{id: "y"}
	for _, p := range patterns {
		tab.add(&subscription{conn: x, client: cx, pattern: p})
		tab.add(&subscription{conn: y, client: cy, pattern: p}) // shadows x's
	}
	got := tab.route(topic)
	if len(got) != len(patterns) {
		t.Fatalf("route = %d subscriptions, want one per pattern (%d)", len(got), len(patterns))
	}
	for i, s := range got {
		if want := patterns[len(patterns)-1-i]; s.pattern != want || s.client != cy {
			t.Errorf("route[%d] = %s %q, want y %q", i, s.client.id, s.pattern, want)
		}
	}
}

// TestAllocsRoute: routing to a common fan-out, ten subscribers, is one
// allocation (the result), not one per doubling of it plus a set.
func TestAllocsRoute(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts do not hold under the race detector")
	}
	var tab subTable
	c := &tableConn{"x"}
	for k := range 10 {
		tab.add(&subscription{conn: c, client: &client{id: "x"}, pattern: "job:" + strings.Repeat("?", k) + "*"})
	}
	n := testing.AllocsPerRun(200, func() {
		if got := tab.route("job:aaaaaaaaaa"); len(got) != 10 {
			t.Fatalf("routed to %d, want 10", len(got))
		}
	})
	if n != 1 {
		t.Errorf("%.2f allocations a route, want 1", n)
	}
}
