package sign

import (
	"container/heap"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Default replay-guard settings.
const (
	DefaultReplayWindow     = 2 * time.Minute
	DefaultReplayMaxEntries = 1 << 18
)

// ReplayGuard rejects messages whose timestamp is outside a clock-skew
// window and messages whose (sender, id) it has already seen inside that
// window. Memory is bounded by maxEntries: when full, the entry with the
// oldest timestamp is evicted and the guard's floor rises to that
// timestamp, so anything at or before the floor is refused as stale rather
// than risking an undetected replay. It is safe for concurrent use.
type ReplayGuard struct {
	window time.Duration
	max    int

	mu    sync.Mutex
	seen  map[string]struct{}
	byAge tsHeap
	floor time.Time
}

// NewReplayGuard returns a guard accepting timestamps within ±window of the
// receiver's clock and remembering at most maxEntries ids. Zero values pick
// the defaults.
func NewReplayGuard(window time.Duration, maxEntries int) *ReplayGuard {
	if window <= 0 {
		window = DefaultReplayWindow
	}
	if maxEntries <= 0 {
		maxEntries = DefaultReplayMaxEntries
	}
	return &ReplayGuard{window: window, max: maxEntries, seen: make(map[string]struct{})}
}

// Window returns the allowed clock skew.
func (g *ReplayGuard) Window() time.Duration { return g.window }

// Check records (sender, id) at timestamp ts and returns ErrStale or
// ErrReplay if the message must be refused. now is the receiver's clock.
func (g *ReplayGuard) Check(sender, id string, ts, now time.Time) error {
	if d := now.Sub(ts); d > g.window || d < -g.window {
		return fmt.Errorf("%w: timestamp %s is %s away from now (allowed ±%s)", ErrStale, ts.UTC().Format(time.RFC3339), d.Round(time.Second), g.window)
	}
	// Length-prefixed, so that no two (sender, id) pairs share a key even
	// when either contains the separator (raw peer IDs contain NUL bytes).
	key := strconv.Itoa(len(sender)) + ":" + sender + id
	g.mu.Lock()
	defer g.mu.Unlock()
	// Forget what can no longer be replayed: older than the window.
	for len(g.byAge) > 0 && now.Sub(g.byAge[0].ts) > g.window {
		delete(g.seen, heap.Pop(&g.byAge).(tsEntry).key)
	}
	if !ts.After(g.floor) {
		return fmt.Errorf("%w: timestamp at or before the replay floor (guard is full)", ErrStale)
	}
	if _, dup := g.seen[key]; dup {
		return fmt.Errorf("%w: id %q from %s", ErrReplay, truncate(id, 64), truncate(sender, 64))
	}
	for len(g.byAge) >= g.max {
		old := heap.Pop(&g.byAge).(tsEntry)
		delete(g.seen, old.key)
		if old.ts.After(g.floor) {
			g.floor = old.ts
		}
	}
	g.seen[key] = struct{}{}
	heap.Push(&g.byAge, tsEntry{key: key, ts: ts})
	return nil
}

// Len returns the number of remembered ids.
func (g *ReplayGuard) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seen)
}

type tsEntry struct {
	key string
	ts  time.Time
}

type tsHeap []tsEntry

func (h tsHeap) Len() int           { return len(h) }
func (h tsHeap) Less(i, j int) bool { return h[i].ts.Before(h[j].ts) }
func (h tsHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *tsHeap) Push(x any)        { *h = append(*h, x.(tsEntry)) }
func (h *tsHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
