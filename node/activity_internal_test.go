package node

import (
	"fmt"
	"testing"

	"github.com/meshagent/meshagent/protocol"
)

// TestCallRingNewestFirst checks the ring keeps the last recentCallsCap
// calls and returns them newest first, before and after it wraps.
func TestCallRingNewestFirst(t *testing.T) {
	var r callRing
	if got := r.snapshot(); len(got) != 0 {
		t.Fatalf("empty ring: %v", got)
	}
	for _, total := range []int{3, recentCallsCap, recentCallsCap + 5, 3*recentCallsCap + 1} {
		r = callRing{}
		for i := range total {
			r.add(protocol.CallRecord{Capability: fmt.Sprint(i)})
		}
		got := r.snapshot()
		want := min(total, recentCallsCap)
		if len(got) != want {
			t.Fatalf("%d added: %d kept, want %d", total, len(got), want)
		}
		for i, c := range got {
			if c.Capability != fmt.Sprint(total-1-i) {
				t.Fatalf("%d added: record %d is call %s, want %d", total, i, c.Capability, total-1-i)
			}
		}
	}
}
