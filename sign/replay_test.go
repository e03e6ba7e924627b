package sign_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshagent/meshagent/sign"
)

var t0 = time.Date(2026, 2, 1, 15, 8, 0, 0, time.UTC)

func TestReplayGuardDefaults(t *testing.T) {
	g := sign.NewReplayGuard(0, 0)
	if g.Window() != sign.DefaultReplayWindow {
		t.Errorf("Window = %v, want %v", g.Window(), sign.DefaultReplayWindow)
	}
	if g := sign.NewReplayGuard(-time.Second, -1); g.Window() != sign.DefaultReplayWindow {
		t.Errorf("negative window: Window = %v", g.Window())
	}
	if g := sign.NewReplayGuard(5*time.Second, 1); g.Window() != 5*time.Second {
		t.Errorf("Window = %v, want 5s", g.Window())
	}
}

func TestReplayGuardWindow(t *testing.T) {
	const w = time.Minute
	tests := []struct {
		name string
		ts   time.Time
		want error
	}{
		{"now", t0, nil},
		{"window ago (inclusive)", t0.Add(-w), nil},
		{"just over window ago", t0.Add(-w - time.Nanosecond), sign.ErrStale},
		{"an hour ago", t0.Add(-time.Hour), sign.ErrStale},
		{"zero time", time.Time{}, sign.ErrStale},
		{"window ahead (inclusive)", t0.Add(w), nil},
		{"just over window ahead", t0.Add(w + time.Nanosecond), sign.ErrStale},
		{"a day ahead", t0.Add(24 * time.Hour), sign.ErrStale},
		{"other time zone, same instant", t0.In(time.FixedZone("X", 5*3600)), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := sign.NewReplayGuard(w, 0)
			if err := g.Check("peer", "id", tc.ts, t0); !errors.Is(err, tc.want) {
				t.Errorf("Check = %v, want %v", err, tc.want)
			}
			if tc.want != nil && g.Len() != 0 {
				t.Errorf("a refused message was remembered (Len %d)", g.Len())
			}
		})
	}
}

func TestReplayGuardReplay(t *testing.T) {
	g := sign.NewReplayGuard(time.Minute, 0)
	steps := []struct {
		sender, id string
		ts         time.Time
		now        time.Time
		want       error
	}{
		{"A", "1", t0, t0, nil},
		{"A", "1", t0, t0, sign.ErrReplay},
		{"A", "1", t0, t0.Add(30 * time.Second), sign.ErrReplay}, // later, still inside the window
		{"A", "1", t0.Add(time.Second), t0, sign.ErrReplay},      // same id, another timestamp
		{"B", "1", t0, t0, nil},                                  // same id from another sender
		{"A", "2", t0, t0, nil},                                  // another id from the same sender
		{"A", "1\x00B", t0, t0, nil},                             // NUL in an id
		{"A\x001", "B", t0, t0, nil},                             // NUL in a sender: not the same pair as ("A", "1\x00B")
		{"A\x00", "1\x00B", t0, t0, nil},
		{"A", "1", t0, t0.Add(time.Minute + time.Nanosecond), sign.ErrStale}, // the replay grew old: stale, not accepted
	}
	for i, s := range steps {
		if err := g.Check(s.sender, s.id, s.ts, s.now); !errors.Is(err, s.want) {
			t.Errorf("step %d Check(%q, %q) = %v, want %v", i, s.sender, s.id, err, s.want)
		}
	}
}

func TestReplayGuardExpiry(t *testing.T) {
	const w = time.Minute
	g := sign.NewReplayGuard(w, 0)
	for i := range 10 {
		ts := t0.Add(time.Duration(i) * time.Second)
		if err := g.Check("A", fmt.Sprint(i), ts, ts); err != nil {
			t.Fatal(err)
		}
	}
	if g.Len() != 10 {
		t.Fatalf("Len = %d, want 10", g.Len())
	}
	// At t0+w+5.5s the entries stamped t0 … t0+5s are older than the window.
	now := t0.Add(w + 5500*time.Millisecond)
	if err := g.Check("B", "x", now, now); err != nil {
		t.Fatal(err)
	}
	if g.Len() != 10-6+1 {
		t.Errorf("Len = %d after expiry, want %d", g.Len(), 10-6+1)
	}
	// An expired entry is not needed: its message is now stale.
	if err := g.Check("A", "0", t0, now); !errors.Is(err, sign.ErrStale) {
		t.Errorf("replay of an expired entry: %v, want ErrStale", err)
	}
	// A kept one is still a replay.
	if err := g.Check("A", "9", t0.Add(9*time.Second), now); !errors.Is(err, sign.ErrReplay) {
		t.Errorf("replay of a kept entry: %v, want ErrReplay", err)
	}
	// Everything expires eventually.
	later := now.Add(2 * w)
	if err := g.Check("C", "y", later, later); err != nil {
		t.Fatal(err)
	}
	if g.Len() != 1 {
		t.Errorf("Len = %d, want 1", g.Len())
	}
}

// A full guard evicts the oldest entry and refuses anything at or before
// its timestamp, so an evicted message cannot be replayed.
func TestReplayGuardFull(t *testing.T) {
	const w = time.Hour
	g := sign.NewReplayGuard(w, 3)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	now := at(100)
	steps := []struct {
		name string
		id   string
		ts   time.Time
		want error
		len  int
	}{
		{"first", "a", at(1), nil, 1},
		{"second", "b", at(2), nil, 2},
		{"third", "c", at(3), nil, 3},
		{"fourth evicts a, floor = 1s", "d", at(4), nil, 3},
		{"replay of evicted a", "a", at(1), sign.ErrStale, 3},
		{"new id at the floor", "e", at(1), sign.ErrStale, 3},
		{"new id below the floor", "f", at(0), sign.ErrStale, 3},
		{"new id just above the floor evicts b", "g", at(1).Add(time.Millisecond), nil, 3},
		{"replay of evicted b", "b", at(2), sign.ErrStale, 3},
		{"replay of kept c", "c", at(3), sign.ErrReplay, 3},
		{"replay of kept d", "d", at(4), sign.ErrReplay, 3},
		{"newer id", "h", at(50), nil, 3},
	}
	for _, s := range steps {
		err := g.Check("A", s.id, s.ts, now)
		if !errors.Is(err, s.want) {
			t.Errorf("%s: Check = %v, want %v", s.name, err, s.want)
		}
		if g.Len() != s.len {
			t.Errorf("%s: Len = %d, want %d", s.name, g.Len(), s.len)
		}
	}
}

// TestReplayGuardNeverAcceptsTwice drives small guards with random traffic
// (many replays, a clock that moves forward) and checks the one property
// that matters: a (sender, id) is never accepted twice, and memory stays
// bounded.
func TestReplayGuardNeverAcceptsTwice(t *testing.T) {
	for _, maxEntries := range []int{1, 2, 5, 64} {
		t.Run(fmt.Sprint("max=", maxEntries), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(maxEntries), 1))
			const w = 10 * time.Second
			g := sign.NewReplayGuard(w, maxEntries)
			type msg struct {
				sender, id string
				ts         time.Time
			}
			var sent []msg
			accepted := map[msg]bool{}
			now := t0
			for i := range 5000 {
				now = now.Add(time.Duration(rng.IntN(300)) * time.Millisecond)
				var m msg
				if len(sent) > 0 && rng.IntN(2) == 0 {
					m = sent[rng.IntN(len(sent))] // a replay of anything seen
				} else {
					skew := time.Duration(rng.Int64N(int64(3*w))) - 3*w/2
					m = msg{fmt.Sprint("s", rng.IntN(3)), fmt.Sprint(i), now.Add(skew)}
					sent = append(sent, m)
				}
				err := g.Check(m.sender, m.id, m.ts, now)
				if err == nil {
					if accepted[m] {
						t.Fatalf("step %d: %v accepted twice", i, m)
					}
					accepted[m] = true
				} else if !errors.Is(err, sign.ErrStale) && !errors.Is(err, sign.ErrReplay) {
					t.Fatalf("step %d: unexpected error %v", i, err)
				}
				if g.Len() > maxEntries {
					t.Fatalf("Len %d > max %d", g.Len(), maxEntries)
				}
			}
			if len(accepted) == 0 {
				t.Fatal("nothing accepted; the test exercises nothing")
			}
		})
	}
}

func TestReplayGuardConcurrent(t *testing.T) {
	g := sign.NewReplayGuard(time.Minute, 0)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for i := range 100 {
				if g.Check("A", fmt.Sprint(i), t0, t0) == nil {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if ok.Load() != 100 {
		t.Errorf("%d messages accepted by 16 racing receivers, want each of 100 exactly once", ok.Load())
	}
}
