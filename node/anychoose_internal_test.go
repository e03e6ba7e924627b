package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
)

// seq returns an intn that yields the given numbers in turn (modulo k).
func seq(nums ...int) func(int) int {
	i := 0
	return func(k int) int {
		v := nums[i%len(nums)] % k
		i++
		return v
	}
}

func cand(name string, mod func(*candidate)) candidate {
	c := candidate{id: peer.ID(name)}
	if mod != nil {
		mod(&c)
	}
	return c
}

func TestChooseProvidersPrefers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cands []candidate
		want  string // first choice, whatever the draw
	}{
		{"available over busy", []candidate{
			cand("busy", func(c *candidate) { c.busy = true }),
			cand("free", nil),
		}, "free"},
		{"busy but reachable over down", []candidate{
			cand("down", func(c *candidate) { c.down = true }),
			cand("busy", func(c *candidate) { c.busy = true; c.load = 1 }),
		}, "busy"},
		{"lower load", []candidate{
			cand("half", func(c *candidate) { c.load = 0.5 }),
			cand("tenth", func(c *candidate) { c.load = 0.1 }),
		}, "tenth"},
		{"load before latency", []candidate{
			cand("near-loaded", func(c *candidate) { c.load = 0.2; c.latency = time.Millisecond }),
			cand("far-idle", func(c *candidate) { c.latency = 80 * time.Millisecond }),
		}, "far-idle"},
		{"load within the slack is a tie, nearer wins", []candidate{
			cand("far-idle", func(c *candidate) { c.latency = 80 * time.Millisecond }),
			cand("near-one-call", func(c *candidate) { c.load = 0.001; c.latency = time.Millisecond }),
		}, "near-one-call"},
		{"nearer at equal load", []candidate{
			cand("far", func(c *candidate) { c.latency = 80 * time.Millisecond }),
			cand("near", func(c *candidate) { c.latency = 10 * time.Millisecond }),
		}, "near"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for first := range 2 { // either drawn first
				got := chooseProviders(tc.cands, MaxAnyAttempts, seq(first, 0))
				if len(got) != 2 || string(got[0].id) != tc.want {
					t.Fatalf("draw %d: order %v, want %s first", first, ids(got), tc.want)
				}
			}
		})
	}
}

func TestChooseProvidersLatencyNoiseIsATie(t *testing.T) {
	a := cand("a", func(c *candidate) { c.latency = 900 * time.Microsecond })
	b := cand("b", func(c *candidate) { c.latency = 6 * time.Millisecond })
	unknown := cand("u", nil)
	for _, tc := range []struct {
		cands []candidate
		draw  []int
		want  string
	}{
		{[]candidate{a, b}, []int{0, 0}, "a"},
		{[]candidate{a, b}, []int{1, 0}, "b"}, // within the slack: the first drawn
		{[]candidate{a, unknown}, []int{1, 0}, "u"},
		{[]candidate{a, unknown}, []int{0, 0}, "a"},
	} {
		got := chooseProviders(tc.cands, 1, seq(tc.draw...))
		if string(got[0].id) != tc.want {
			t.Errorf("draw %v of %v: got %s, want %s", tc.draw, ids(tc.cands), got[0].id, tc.want)
		}
	}
}

func TestChooseProvidersBoundedAndDistinct(t *testing.T) {
	var cs []candidate
	for i := range 7 {
		cs = append(cs, cand(fmt.Sprint("p", i), nil))
	}
	for range 100 {
		got := chooseProviders(cs, MaxAnyAttempts, rand.IntN)
		if len(got) != MaxAnyAttempts {
			t.Fatalf("got %d candidates, want %d", len(got), MaxAnyAttempts)
		}
		seen := map[peer.ID]bool{}
		for _, c := range got {
			if seen[c.id] {
				t.Fatalf("%s chosen twice: %v", c.id, ids(got))
			}
			seen[c.id] = true
		}
	}
	if got := chooseProviders(cs[:2], MaxAnyAttempts, rand.IntN); len(got) != 2 {
		t.Fatalf("2 candidates gave %d", len(got))
	}
	if got := chooseProviders(nil, MaxAnyAttempts, rand.IntN); len(got) != 0 {
		t.Fatalf("no candidates gave %d", len(got))
	}
}

// TestChooseProvidersSpreads checks the power of two choices: equal
// providers share the first choice about evenly, and of three with
// different loads the most loaded is never first.
func TestChooseProvidersSpreads(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	equal := []candidate{cand("a", nil), cand("b", nil), cand("c", nil)}
	firsts := map[peer.ID]int{}
	const draws = 3000
	for range draws {
		firsts[chooseProviders(equal, 1, r.IntN)[0].id]++
	}
	for _, c := range equal {
		if k := firsts[c.id]; k < draws/3-150 || k > draws/3+150 {
			t.Errorf("%s first %d times of %d: %v", c.id, k, draws, firsts)
		}
	}
	loaded := []candidate{
		cand("idle", nil),
		cand("some", func(c *candidate) { c.load = 0.3 }),
		cand("most", func(c *candidate) { c.load = 0.9 }),
	}
	clear(firsts)
	for range draws {
		firsts[chooseProviders(loaded, 1, r.IntN)[0].id]++
	}
	if firsts["most"] != 0 || firsts["idle"] <= firsts["some"] {
		t.Errorf("first choices by load: %v", firsts)
	}
}

func TestAnyMayFailOver(t *testing.T) {
	e := func(c protocol.Code) error { return protocol.Errorf(c, "x") }
	for _, tc := range []struct {
		stage      callStage
		err        error
		idempotent bool
		want       bool
	}{
		// Not sent: no handler can have seen it.
		{stageNotSent, e(protocol.CodeUnknownAgent), false, true},
		{stageNotSent, e(protocol.CodeTimeout), false, true},
		{stageNotSent, e(protocol.CodeInvalidMessage), true, false},
		{stageNotSent, ErrClosed, true, false},
		// Refused before the handler.
		{stageAnswered, e(protocol.CodeCapabilityNotSupported), false, true},
		{stageAnswered, e(protocol.CodeRateLimited), false, true},
		{stageAnswered, e(protocol.CodeUnauthorized), false, false},
		{stageAnswered, e(protocol.CodeUnauthorized), true, false},
		// Read, and mostly run: final even when idempotent.
		{stageAnswered, e(protocol.CodeInvalidMessage), true, false},
		{stageAnswered, e(protocol.CodeInvalidSignature), true, false},
		{stageAnswered, e(protocol.CodeInternalError), true, false},
		{stageAnswered, e(protocol.CodeTimeout), true, false},
		{stageAnswered, e(protocol.CodeUnknownAgent), true, false},
		// Lost in flight: only an idempotent request runs again.
		{stageSent, e(protocol.CodeUnknownAgent), false, false},
		{stageSent, e(protocol.CodeUnknownAgent), true, true},
		{stageSent, e(protocol.CodeTimeout), true, false},
		{stageSent, context.Canceled, true, false},
		{stageSent, ErrClosed, true, false},
	} {
		if got := mayFailOver(tc.stage, tc.err, tc.idempotent); got != tc.want {
			t.Errorf("stage %d, %v, idempotent %v: fail over %v, want %v", tc.stage, tc.err, tc.idempotent, got, tc.want)
		}
	}
}

func ids(cs []candidate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = string(c.id)
	}
	return out
}
