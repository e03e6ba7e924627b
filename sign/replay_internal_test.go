package sign

import (
	"container/heap"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
)

// refHeap is tsHeap as container/heap drives it, which the guard used
// before its heap was written out for tsEntry.
type refHeap []tsEntry

func (h refHeap) Len() int           { return len(h) }
func (h refHeap) Less(i, j int) bool { return h[i].ts.Before(h[j].ts) }
func (h refHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *refHeap) Push(x any)        { *h = append(*h, x.(tsEntry)) }
func (h *refHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// TestTSHeapMatchesContainerHeap checks that pushes and pops give the
// entries in the order container/heap gives them, ties included (the
// guard evicts by that order when full).
func TestTSHeapMatchesContainerHeap(t *testing.T) {
	base := time.Unix(1700000000, 0)
	for _, tc := range []struct {
		name   string
		spread int // distinct timestamps; few means many ties
	}{
		{"ties", 3},
		{"some ties", 50},
		{"distinct", 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(1, uint64(tc.spread)))
			var got tsHeap
			var want refHeap
			for i := range 5000 {
				if len(got) > 0 && r.IntN(3) == 0 {
					g, w := got.pop(), heap.Pop(&want).(tsEntry)
					if g != w {
						t.Fatalf("step %d: popped %v, container/heap %v", i, g, w)
					}
					continue
				}
				e := tsEntry{key: replayKey{sender: "s", id: strconv.Itoa(i)}, ts: base.Add(time.Duration(r.IntN(tc.spread)) * time.Millisecond)}
				got.push(e)
				heap.Push(&want, e)
			}
			for len(got) > 0 {
				if g, w := got.pop(), heap.Pop(&want).(tsEntry); g != w {
					t.Fatalf("draining: popped %v, container/heap %v", g, w)
				}
			}
		})
	}
}
