package store

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// mailItem is a message of queue "mb" from from to "agent".
func mailItem(id, from string) Message {
	m := msg(id, "agent:agent")
	m.Queue, m.From, m.To = "mb", from, "agent"
	return m
}

// TestEnqueueDisplacing: a message that finds its recipient full takes the
// place of one the recipient left long enough ago, from the sender holding
// the most; never of one it did not leave, or left too recently; and a
// refusal changes nothing.
func TestEnqueueDisplacing(t *testing.T) {
	s, clk := open(t)
	ctx := context.Background()
	b := Bounds{PerRecipient: 5}
	for _, m := range []Message{mailItem("a1", "a"), mailItem("a2", "a"), mailItem("a3", "a"), mailItem("b1", "b"), mailItem("c1", "c")} {
		if err := s.EnqueueWithin(ctx, m, b); err != nil {
			t.Fatal(err)
		}
	}
	leftAt := clk.Now()
	if n, err := s.MarkLeft(ctx, "mb", "agent", leftAt, "a2", "a3", "b1", "nope"); err != nil || n != 3 {
		t.Fatalf("marked %d %v, want 3", n, err)
	}
	// Marked again later: the first time is kept.
	if n, err := s.MarkLeft(ctx, "mb", "agent", leftAt.Add(time.Hour), "a2", "a1"); err != nil || n != 1 {
		t.Fatalf("marked again %d %v, want 1 (a1 only)", n, err)
	}
	// a1 was left an hour after the others: too recent for a deadline of
	// leftAt.
	before := leftAt.Add(time.Minute)
	d, err := s.EnqueueDisplacing(ctx, mailItem("d1", "d"), b, before)
	if err != nil || !slices.Equal(ids(d), []string{"a2"}) {
		t.Fatalf("displaced %v %v, want a2 (a holds the most; a1 left too recently)", ids(d), err)
	}
	if d[0].Left.IsZero() || !d[0].Left.Equal(leftAt) {
		t.Fatalf("displaced message's Left %v, want %v", d[0].Left, leftAt)
	}
	// Now a holds 2 (a1 too recent, a3), b and c and d 1: a3 goes.
	if d, err = s.EnqueueDisplacing(ctx, mailItem("e1", "e"), b, before); err != nil || !slices.Equal(ids(d), []string{"a3"}) {
		t.Fatalf("displaced %v %v, want a3", ids(d), err)
	}
	if d, err = s.EnqueueDisplacing(ctx, mailItem("f1", "f"), b, before); err != nil || !slices.Equal(ids(d), []string{"b1"}) {
		t.Fatalf("displaced %v %v, want b1", ids(d), err)
	}
	// Nothing left long enough remains: full, and nothing was deleted.
	d, err = s.EnqueueDisplacing(ctx, mailItem("g1", "g"), b, before)
	if !errors.Is(err, ErrFull) || d != nil {
		t.Fatalf("displaced %v %v, want ErrFull and nothing", ids(d), err)
	}
	p, _, err := s.PendingFor(ctx, "mb", "agent", 0, 0)
	if err != nil || !slices.Equal(ids(p), []string{"a1", "c1", "d1", "e1", "f1"}) {
		t.Fatalf("held %v %v", ids(p), err)
	}
	// Without a deadline, EnqueueWithin displaces nothing.
	if err := s.EnqueueWithin(ctx, mailItem("g1", "g"), b); !errors.Is(err, ErrFull) {
		t.Fatalf("EnqueueWithin: %v, want ErrFull", err)
	}
	// A sender past its own share displaces nothing either.
	if _, err := s.EnqueueDisplacing(ctx, mailItem("a4", "a"), Bounds{PerRecipient: 5, PerSender: 1}, leftAt.Add(2*time.Hour)); !errors.Is(err, ErrFull) {
		t.Fatalf("over its share: %v, want ErrFull", err)
	}
}

// TestEnqueueDisplacingBytes: a message that needs the bytes of several
// left messages displaces as many as it needs, or none.
func TestEnqueueDisplacingBytes(t *testing.T) {
	s, clk := open(t)
	ctx := context.Background()
	small := func(id, from string) Message {
		m := mailItem(id, from)
		m.Payload = []byte(`"0123456789"`) // 12 bytes
		return m
	}
	b := Bounds{PerRecipientBytes: 48}
	for _, id := range []string{"x1", "x2", "x3", "x4"} {
		if err := s.EnqueueWithin(ctx, small(id, "x"), b); err != nil {
			t.Fatal(err)
		}
	}
	big := mailItem("h1", "h")
	big.Payload = []byte(`"01234567890123456789"`) // 22 bytes: two must go
	if _, err := s.EnqueueDisplacing(ctx, big, b, clk.Now()); !errors.Is(err, ErrFull) {
		t.Fatalf("nothing left yet: %v, want ErrFull", err)
	}
	if _, err := s.MarkLeft(ctx, "mb", "agent", clk.Now(), "x1", "x2", "x3"); err != nil {
		t.Fatal(err)
	}
	d, err := s.EnqueueDisplacing(ctx, big, b, clk.Now())
	if err != nil || !slices.Equal(ids(d), []string{"x1", "x2"}) {
		t.Fatalf("displaced %v %v, want x1 and x2", ids(d), err)
	}
	if u, err := s.QueueUsage(ctx, "mb"); err != nil || u.Bytes != 46 {
		t.Fatalf("queue bytes %d %v, want 46", u.Bytes, err)
	}
}

// TestMarkLeftOwnOnly: an agent marks only its own messages, and a
// replayed dead letter starts unmarked.
func TestMarkLeftOwnOnly(t *testing.T) {
	s, clk := open(t)
	ctx := context.Background()
	m := mailItem("m1", "a")
	if err := s.EnqueueWithin(ctx, m, Bounds{}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.MarkLeft(ctx, "mb", "someone-else", clk.Now(), "m1"); err != nil || n != 0 {
		t.Fatalf("another recipient marked %d %v", n, err)
	}
	if n, err := s.MarkLeft(ctx, "other", "agent", clk.Now(), "m1"); err != nil || n != 0 {
		t.Fatalf("another queue marked %d %v", n, err)
	}
	if n, err := s.MarkLeft(ctx, "mb", "agent", clk.Now(), "m1"); err != nil || n != 1 {
		t.Fatalf("marked %d %v", n, err)
	}
	p, _, _ := s.PendingFor(ctx, "mb", "agent", 0, 0)
	if len(p) != 1 || !p[0].Left.Equal(clk.Now()) {
		t.Fatalf("pending %+v", p)
	}
	if err := s.DeadLetter(ctx, p[0], "test"); err != nil {
		t.Fatal(err)
	}
	r, err := s.Replay(ctx, "m1")
	if err != nil || !r.Left.IsZero() {
		t.Fatalf("replayed %+v %v, want Left zero", r, err)
	}
}
