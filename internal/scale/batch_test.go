package scale

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

// A cluster started in batches starts every node once, node 0 alone
// first and the provider (the last node) alone after every other; a
// batch's nodes start together, never more than join at once, and each
// node's bootstrap peers are in batches that finished before its own
// began. With join 1 the bootstrap graph is the one-at-a-time start's,
// so that earlier runs' figures stay comparable.
func TestStartInBatches(t *testing.T) {
	for _, tc := range []struct{ n, join int }{
		{3, 1}, {10, 1}, {10, 3}, {10, 8}, {10, 20}, {101, 20},
	} {
		var (
			mu        sync.Mutex
			order     []int
			running   int
			most      int
			prepared  = map[int]bool{}
			finished  = map[int]bool{}
			told      []int
			bootBatch = sparse(rand.New(rand.NewPCG(1, 2)), tc.n, tc.join)
		)
		startInBatches(tc.n, tc.join, func(i int) {
			mu.Lock()
			defer mu.Unlock()
			prepared[i] = true
		}, func(i int) {
			mu.Lock()
			if !prepared[i] {
				t.Errorf("n=%d join=%d: node %d started before it was prepared", tc.n, tc.join, i)
			}
			for _, j := range bootBatch[i] {
				if !finished[j] || batchStart(j, tc.n, tc.join) == batchStart(i, tc.n, tc.join) {
					t.Errorf("n=%d join=%d: node %d bootstraps to %d, which is not up in an earlier batch", tc.n, tc.join, i, j)
				}
			}
			order = append(order, i)
			running++
			most = max(most, running)
			mu.Unlock()

			mu.Lock()
			running--
			finished[i] = true
			mu.Unlock()
		}, func(k int) {
			// Told after each batch, with every node of it finished: what
			// the start's log and the pause between batches rely on.
			mu.Lock()
			defer mu.Unlock()
			if k != len(finished) || (len(told) > 0 && k <= told[len(told)-1]) {
				t.Errorf("n=%d join=%d: told %d started after %v, with %d finished", tc.n, tc.join, k, told, len(finished))
			}
			told = append(told, k)
		})
		if len(told) == 0 || told[len(told)-1] != tc.n {
			t.Errorf("n=%d join=%d: told %v, want a last count of %d", tc.n, tc.join, told, tc.n)
		}
		if len(order) != tc.n || order[0] != 0 || order[tc.n-1] != tc.n-1 {
			t.Fatalf("n=%d join=%d: started %v, want every node once, 0 first and %d last", tc.n, tc.join, order, tc.n-1)
		}
		sorted := slices.Sorted(slices.Values(order))
		for i, v := range sorted {
			if v != i {
				t.Fatalf("n=%d join=%d: started %v, want every node once", tc.n, tc.join, order)
			}
		}
		if most > max(tc.join, 1) {
			t.Errorf("n=%d join=%d: %d nodes started at once", tc.n, tc.join, most)
		}
	}
	one := sparse(rand.New(rand.NewPCG(7, 100)), 100, 1)
	seq := rand.New(rand.NewPCG(7, 100))
	for i := 1; i < 100; i++ {
		want := []int{seq.IntN(i)}
		if i > 1 && seq.IntN(2) == 0 {
			if j := seq.IntN(i); j != want[0] {
				want = append(want, j)
			}
		}
		if !slices.Equal(one[i], want) {
			t.Fatalf("join 1: node %d bootstraps to %v, want %v (the one-at-a-time graph)", i, one[i], want)
		}
	}
}
