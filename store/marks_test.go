package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestMarks: a mark is set until its expiry, renewed in place, bounded per
// scope (expired marks make room), and pruned.
func TestMarks(t *testing.T) {
	s, clock := open(t)
	ctx := context.Background()
	until := clock.Now().Add(time.Hour)
	for _, k := range []string{"a", "b"} {
		if err := s.Mark(ctx, "agents", k, until, 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Mark(ctx, "agents", "a", until.Add(time.Hour), 2); err != nil {
		t.Fatalf("renewing a mark of a full scope: %v", err)
	}
	if err := s.Mark(ctx, "agents", "c", until, 2); !errors.Is(err, ErrFull) {
		t.Fatalf("a third mark: %v, want ErrFull", err)
	}
	if err := s.Mark(ctx, "other", "c", until, 2); err != nil {
		t.Fatalf("another scope: %v", err)
	}
	for _, tc := range []struct {
		key  string
		at   time.Time
		want bool
	}{
		{"a", until.Add(time.Minute), true},
		{"b", until.Add(-time.Minute), true},
		{"b", until, false},
		{"c", clock.Now(), false},
	} {
		if _, ok, err := s.Marked(ctx, "agents", tc.key, tc.at); err != nil || ok != tc.want {
			t.Fatalf("Marked(%s at %s) = %v, %v; want %v", tc.key, tc.at, ok, err, tc.want)
		}
	}
	clock.Set(until.Add(time.Minute)) // b expired: it makes room
	if err := s.Mark(ctx, "agents", "c", clock.Now().Add(time.Hour), 2); err != nil {
		t.Fatalf("a mark after one expired: %v", err)
	}
	if n, err := s.PruneMarks(ctx, "agents", clock.Now().Add(3*time.Hour)); err != nil || n != 0 {
		t.Fatalf("prune: %d left, %v", n, err)
	}
	for _, bad := range [][2]string{{"", "k"}, {"s", ""}, {"s\x00", "k"}} {
		if err := s.Mark(ctx, bad[0], bad[1], until, 0); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Mark(%q, %q): %v, want ErrInvalid", bad[0], bad[1], err)
		}
	}
}

// TestSenderBytesBound: one sender's bytes in a named queue are bounded
// whatever their recipients, and freed as its messages go.
func TestSenderBytesBound(t *testing.T) {
	s, clock := open(t)
	ctx := context.Background()
	b := Bounds{SenderBytes: 30}
	put := func(id, from, to string) error {
		return s.EnqueueWithin(ctx, Message{ID: id, Queue: "q", Topic: "t", From: from, To: to, Payload: []byte(`"0123456789"`), Time: clock.Now()}, b)
	}
	for i, to := range []string{"r1", "r2"} {
		if err := put("m"+to, "s", to); err != nil {
			t.Fatalf("deposit %d: %v", i, err)
		}
	}
	if err := put("m3", "s", "r3"); !errors.Is(err, ErrFull) {
		t.Fatalf("past the sender's share: %v, want ErrFull", err)
	}
	if err := put("m4", "other", "r3"); err != nil {
		t.Fatalf("another sender: %v", err)
	}
	if err := s.Delivered(ctx, "mr1"); err != nil {
		t.Fatal(err)
	}
	if err := put("m3", "s", "r3"); err != nil {
		t.Fatalf("after one was delivered: %v", err)
	}
}

// TestPoolBytesBound: the messages of one pool of a named queue are
// bounded in bytes together, whoever sends them; a message in no pool
// (or another) is not, and the pool's bytes are freed as its messages go,
// dead-lettered ones included.
func TestPoolBytesBound(t *testing.T) {
	s, clock := open(t)
	ctx := context.Background()
	b := Bounds{PoolBytes: 30, Bytes: 50}
	put := func(id, pool string) error {
		return s.EnqueueWithin(ctx, Message{ID: id, Queue: "q", Topic: "t", From: id, To: "r" + id, Pool: pool, Payload: []byte(`"0123456789"`), Time: clock.Now()}, b)
	}
	for _, id := range []string{"u1", "u2"} {
		if err := put(id, "unknown"); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	if err := put("u3", "unknown"); !errors.Is(err, ErrFull) {
		t.Fatalf("past the pool's bytes: %v, want ErrFull", err)
	}
	if err := put("k1", ""); err != nil {
		t.Fatalf("a message in no pool: %v", err)
	}
	if err := put("o1", "other"); err != nil {
		t.Fatalf("a message of another pool: %v", err)
	}
	if err := put("k2", ""); !errors.Is(err, ErrFull) {
		t.Fatalf("past the queue's bytes: %v, want ErrFull", err)
	}
	if err := s.Delivered(ctx, "u1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLetter(ctx, Message{ID: "u2", Queue: "q", Topic: "t", From: "u2", To: "ru2", Pool: "unknown", Payload: []byte(`"0123456789"`)}, "test"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delivered(ctx, "o1"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"u3", "u4"} {
		if err := put(id, "unknown"); err != nil {
			t.Fatalf("%s after the pool's messages went: %v", id, err)
		}
	}
	if err := s.EnqueueWithin(ctx, Message{ID: "x", Topic: "t", Pool: "p", Payload: []byte(`1`)}, Bounds{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a pool in the bus's outbox: %v, want ErrInvalid", err)
	}
}

// TestPostponeFor: every message of a queue for one recipient moves to
// one next attempt (never past its expiry) in one call; others stay.
func TestPostponeFor(t *testing.T) {
	s, clock := open(t)
	ctx := context.Background()
	now := clock.Now()
	for i, m := range []Message{
		{ID: "a1", To: "a", Expires: now.Add(time.Hour)},
		{ID: "a2", To: "a", Expires: now.Add(time.Minute)},
		{ID: "b1", To: "b", Expires: now.Add(time.Hour)},
	} {
		m.Queue, m.Topic, m.Payload, m.NextAttempt = "q", "t", []byte(`{}`), now.Add(time.Duration(i)*time.Second)
		if err := s.EnqueueWithin(ctx, m, Bounds{}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.PostponeFor(ctx, "q", "a", "away", now.Add(10*time.Minute), now.Add(time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("moved %d, %v; want 2", n, err)
	}
	due, err := s.DueIn(ctx, "q", now.Add(30*time.Second), 10)
	if err != nil || len(due) != 1 || due[0].ID != "b1" {
		t.Fatalf("due %v %v, want b1 only", ids(due), err)
	}
	due, err = s.DueIn(ctx, "q", now.Add(2*time.Minute), 10)
	if got := ids(due); err != nil || len(got) != 2 || got[1] != "a2" {
		t.Fatalf("due %v %v, want b1 then a2 (at its expiry)", got, err)
	}
	if due[1].LastError != "away" {
		t.Fatalf("last error %q", due[0].LastError)
	}
}
