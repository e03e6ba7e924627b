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
