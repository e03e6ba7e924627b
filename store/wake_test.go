package store

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TestPostponeKeepsAttempts: postponing moves the next attempt and keeps
// the attempt count (an absence is not a delivery); Retry counts one.
func TestPostponeKeepsAttempts(t *testing.T) {
	s, clk := open(t)
	ctx := context.Background()
	m := msg("m1", "task:1")
	m.To, m.Expires = "worker", clk.Now().Add(2*time.Hour)
	if err := s.Enqueue(ctx, m); err != nil {
		t.Fatal(err)
	}
	if p, err := s.Pending(ctx, 0); err != nil || len(p) != 1 || !p[0].Expires.Equal(m.Expires) {
		t.Fatalf("pending %+v %v, want the expiry kept", p, err)
	}
	if err := s.Retry(ctx, "m1", "busy", clk.Now()); err != nil {
		t.Fatal(err)
	}
	later := clk.Now().Add(time.Hour)
	if err := s.Postpone(ctx, "m1", "waiting for worker", later, later); err != nil {
		t.Fatal(err)
	}
	if due, _ := s.Due(ctx, clk.Now(), 0); len(due) != 0 {
		t.Fatalf("due after postponing: %+v", due)
	}
	p, err := s.Pending(ctx, 0)
	if err != nil || len(p) != 1 {
		t.Fatalf("pending %+v %v", p, err)
	}
	if p[0].Attempts != 1 || p[0].LastError != "waiting for worker" || !p[0].NextAttempt.Equal(later) || !p[0].Expires.Equal(later) {
		t.Errorf("postponed %+v, want 1 attempt, the note, next attempt and expiry in an hour", p[0])
	}
	// Replay starts afresh: no expiry.
	if err := s.DeadLetter(ctx, p[0], "gone"); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Replay(ctx, "m1"); err != nil || !m.Expires.IsZero() || m.Attempts != 0 {
		t.Errorf("replayed %+v %v, want no expiry and no attempts", m, err)
	}
	if err := s.Postpone(ctx, "nope", "x", later, time.Time{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("postpone of a missing id: %v", err)
	}
}

// TestWake: Wake makes due what is addressed to one client and waits,
// leaves other clients' messages and unaddressed ones alone, and the index
// it reads follows DeadLetter and Replay.
func TestWake(t *testing.T) {
	s, clk := open(t)
	ctx := context.Background()
	later := clk.Now().Add(time.Hour)
	for _, m := range []struct{ id, to string }{{"a1", "alice"}, {"a2", "alice"}, {"b1", "bob"}, {"n1", ""}, {"al", "alice-2"}} {
		mm := msg(m.id, "t:1")
		mm.To, mm.NextAttempt = m.to, later
		if err := s.Enqueue(ctx, mm); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.Wake(ctx, "alice", clk.Now())
	if err != nil || n != 2 {
		t.Fatalf("Wake(alice) = %d, %v; want 2", n, err)
	}
	due, err := s.Due(ctx, clk.Now(), 0)
	if err != nil || strings.Join(ids(due), " ") != "a1 a2" {
		t.Fatalf("due %q %v, want a1 a2", ids(due), err)
	}
	if n, err := s.Wake(ctx, "alice", clk.Now()); err != nil || n != 0 {
		t.Errorf("second Wake = %d, %v; want 0 (already due)", n, err)
	}
	b1 := msg("b1", "t:1")
	b1.To = "bob"
	if err := s.DeadLetter(ctx, b1, "gone"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Wake(ctx, "bob", clk.Now()); err != nil || n != 0 {
		t.Errorf("Wake(bob) after its message was dead-lettered = %d, %v", n, err)
	}
	if _, err := s.Replay(ctx, "b1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Postpone(ctx, "b1", "away", later, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Wake(ctx, "bob", clk.Now()); err != nil || n != 1 {
		t.Errorf("Wake(bob) after replay = %d, %v; want 1", n, err)
	}
	if _, err := s.Wake(ctx, "", clk.Now()); err == nil {
		t.Error("Wake with no addressee accepted")
	}
	if err := s.Delivered(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Postpone(ctx, "a2", "away", later, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Wake(ctx, "alice", clk.Now()); err != nil || n != 1 {
		t.Errorf("Wake(alice) after one was delivered = %d, %v; want 1", n, err)
	}
}

// TestNextDue: the earliest next attempt, or none.
func TestNextDue(t *testing.T) {
	s, clk := open(t)
	ctx := context.Background()
	if _, ok, err := s.NextDue(ctx); ok || err != nil {
		t.Fatalf("NextDue of an empty outbox: %v %v", ok, err)
	}
	for i, d := range []time.Duration{time.Hour, time.Minute, 2 * time.Hour} {
		m := msg(string(rune('a'+i)), "t:1")
		m.NextAttempt = clk.Now().Add(d)
		if err := s.Enqueue(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	next, ok, err := s.NextDue(ctx)
	if err != nil || !ok || !next.Equal(clk.Now().Add(time.Minute)) {
		t.Fatalf("NextDue = %v %v %v, want in a minute", next, ok, err)
	}
}

// TestUpgradeSchema1 opens a file written before outbox_to existed: the
// index is built, so Wake finds what was already waiting.
func TestUpgradeSchema1(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	s, err := Open(path, WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	m := msg("old", "t:1")
	m.To, m.NextAttempt = "carol", time.Now().Add(time.Hour)
	if err := s.Enqueue(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		if err := tx.DeleteBucket([]byte(bucketOutboxTo)); err != nil {
			return err
		}
		return tx.Bucket([]byte(bucketMeta)).Put([]byte("schema"), []byte{1})
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n, err := s.Wake(context.Background(), "carol", time.Now()); err != nil || n != 1 {
		t.Errorf("Wake after the upgrade = %d, %v; want 1", n, err)
	}
	var v []byte
	_ = s.db.View(func(tx *bolt.Tx) error { v = tx.Bucket([]byte(bucketMeta)).Get([]byte("schema")); return nil })
	if len(v) != 1 || v[0] != schemaVersion {
		t.Errorf("schema after the upgrade %v, want %d", v, schemaVersion)
	}
}
