package sign

import (
	"encoding/binary"
	"fmt"
	"hash/maphash"
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
// than risking an undetected replay. An id is remembered as a 128-bit
// keyed hash of (sender, id), some 60 bytes whatever the strings' lengths,
// so the default bound of 1<<18 ids is at most about 16 MB. It is safe for
// concurrent use.
type ReplayGuard struct {
	window time.Duration
	max    int
	seeds  [2]maphash.Seed

	mu    sync.Mutex
	seen  map[replayKey]struct{}
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
	return &ReplayGuard{window: window, max: maxEntries, seeds: [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()}, seen: make(map[replayKey]struct{})}
}

// Window returns the allowed clock skew.
func (g *ReplayGuard) Window() time.Duration { return g.window }

// Check records (sender, id) at timestamp ts and returns ErrStale or
// ErrReplay if the message must be refused. now is the receiver's clock.
func (g *ReplayGuard) Check(sender, id string, ts, now time.Time) error {
	if d := now.Sub(ts); d > g.window || d < -g.window {
		return fmt.Errorf("%w: timestamp %s is %s away from now (allowed ±%s)", ErrStale, ts.UTC().Format(time.RFC3339), d.Round(time.Second), g.window)
	}
	key := g.key(sender, id)
	g.mu.Lock()
	defer g.mu.Unlock()
	// Forget what can no longer be replayed: older than the window.
	for len(g.byAge) > 0 && now.Sub(g.byAge[0].ts) > g.window {
		delete(g.seen, g.byAge.pop().key)
	}
	if !ts.After(g.floor) {
		return fmt.Errorf("%w: timestamp at or before the replay floor (guard is full)", ErrStale)
	}
	if _, dup := g.seen[key]; dup {
		return fmt.Errorf("%w: id %q from %s", ErrReplay, truncate(id, 64), truncate(sender, 64))
	}
	for len(g.byAge) >= g.max {
		old := g.byAge.pop()
		delete(g.seen, old.key)
		if old.ts.After(g.floor) {
			g.floor = old.ts
		}
	}
	g.seen[key] = struct{}{}
	g.byAge.push(tsEntry{key: key, ts: ts})
	return nil
}

// Len returns the number of remembered ids.
func (g *ReplayGuard) Len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seen)
}

// replayKey is a (sender, id) pair as two 64-bit hashes under the
// guard's random seeds: 16 bytes, where the two strings it replaces kept
// their bytes (some 90 for a peer id and a UUID) alive for the window. The
// same pair always has the same key, so a replay is never missed; two
// pairs sharing a key (odds about 2^-90 with the guard full, and the seeds
// are secret, so a sender cannot aim at another's key) would only refuse
// the second as a replay.
type replayKey [2]uint64

// key hashes (sender, id): sender's length first, so that no other split
// of the same bytes gives the same input (raw peer IDs contain any byte).
// It does not allocate.
func (g *ReplayGuard) key(sender, id string) replayKey {
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(sender)))
	var k replayKey
	for i, seed := range g.seeds {
		var h maphash.Hash
		h.SetSeed(seed)
		_, _ = h.Write(n[:])
		_, _ = h.WriteString(sender)
		_, _ = h.WriteString(id)
		k[i] = h.Sum64()
	}
	return k
}

type tsEntry struct {
	key replayKey
	ts  time.Time
}

// tsHeap is a min-heap of entries by timestamp. It is container/heap's
// algorithm written for tsEntry, so that a push or a pop does not box an
// entry in an interface (an allocation each, on every message checked).
type tsHeap []tsEntry

func (h tsHeap) less(i, j int) bool { return h[i].ts.Before(h[j].ts) }

func (h *tsHeap) push(e tsEntry) {
	*h = append(*h, e)
	h.up(len(*h) - 1)
}

// pop removes and returns the entry with the oldest timestamp.
func (h *tsHeap) pop() tsEntry {
	old := *h
	n := len(old) - 1
	old[0], old[n] = old[n], old[0]
	h.down(0, n)
	e := old[n]
	old[n] = tsEntry{} // no reference to the key stays in the array
	*h = old[:n]
	return e
}

func (h tsHeap) up(j int) {
	for {
		i := (j - 1) / 2 // parent
		if i == j || !h.less(j, i) {
			break
		}
		h[i], h[j] = h[j], h[i]
		j = i
	}
}

func (h tsHeap) down(i, n int) {
	for {
		j1 := 2*i + 1
		if j1 >= n || j1 < 0 { // j1 < 0 after int overflow
			break
		}
		j := j1 // left child
		if j2 := j1 + 1; j2 < n && h.less(j2, j1) {
			j = j2
		}
		if !h.less(j, i) {
			break
		}
		h[i], h[j] = h[j], h[i]
		i = j
	}
}
