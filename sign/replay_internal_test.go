package sign

import (
	"container/heap"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
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
				e := tsEntry{key: replayKey{uint64(i), 0}, ts: base.Add(time.Duration(r.IntN(tc.spread)) * time.Millisecond)}
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

// TestReplayGuardEntrySize: a remembered id costs the guard at most
// 128 bytes however long its sender and id are, since it keeps their
// hash and not the strings (which cost it 2×200 bytes each here).
func TestReplayGuardEntrySize(t *testing.T) {
	const n = 20000
	now := time.Now()
	senders := make([]string, n)
	ids := make([]string, n)
	for i := range n {
		senders[i] = strings.Repeat("s", 192) + strconv.Itoa(i)
		ids[i] = strings.Repeat("i", 192) + strconv.Itoa(i)
	}
	g := NewReplayGuard(0, 0)
	before := heapAlloc()
	for i := range n {
		// Strings of their own, as a decoder hands them over.
		if err := g.Check(strings.Clone(senders[i]), strings.Clone(ids[i]), now, now); err != nil {
			t.Fatal(err)
		}
	}
	perEntry := float64(int64(heapAlloc())-int64(before)) / n
	runtime.KeepAlive(senders)
	runtime.KeepAlive(ids)
	if g.Len() != n || perEntry > 128 {
		t.Fatalf("%d ids remembered at %.0f bytes each, want %d at most 128", g.Len(), perEntry, n)
	}
	t.Logf("%.0f bytes per remembered id", perEntry)
	runtime.KeepAlive(g)
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}
