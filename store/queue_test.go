package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// TestQueuesAreSeparate: a named queue's messages are invisible to the
// bus's Due, NextDue, Wake and Pending, and the other way round; ids are
// shared, and a dead letter replays into the queue it came from.
func TestQueuesAreSeparate(t *testing.T) {
	s, clk := open(t)
	ctx := context.Background()
	bus := msg("b1", "task:1")
	bus.To = "peer-x"
	if err := s.Enqueue(ctx, bus); err != nil {
		t.Fatal(err)
	}
	q := msg("q1", "agent:x")
	q.To, q.Queue = "peer-x", "node"
	if err := s.EnqueueWithin(ctx, q, Bounds{}); err != nil {
		t.Fatal(err)
	}
	dup := msg("b1", "agent:x")
	dup.Queue = "node"
	if err := s.EnqueueWithin(ctx, dup, Bounds{}); !errors.Is(err, ErrExists) {
		t.Fatalf("an id of the bus's outbox in a queue: %v, want ErrExists", err)
	}
	now := clk.Now()
	if d, err := s.Due(ctx, now, 0); err != nil || !slices.Equal(ids(d), []string{"b1"}) {
		t.Fatalf("bus due %v %v", ids(d), err)
	}
	if d, err := s.DueIn(ctx, "node", now, 0); err != nil || !slices.Equal(ids(d), []string{"q1"}) || d[0].Queue != "node" {
		t.Fatalf("queue due %+v %v", d, err)
	}
	if p, err := s.Pending(ctx, 0); err != nil || !slices.Equal(ids(p), []string{"b1"}) {
		t.Fatalf("bus pending %v %v", ids(p), err)
	}
	later := now.Add(time.Hour)
	if err := s.Postpone(ctx, "q1", "away", later, later); err != nil {
		t.Fatal(err)
	}
	if err := s.Postpone(ctx, "b1", "away", later.Add(time.Hour), later); err != nil {
		t.Fatal(err)
	}
	if next, ok, err := s.NextDueIn(ctx, "node"); err != nil || !ok || !next.Equal(later) {
		t.Fatalf("queue next due %v %v %v, want %v", next, ok, err, later)
	}
	if n, err := s.WakeIn(ctx, "node", "peer-x", now); err != nil || n != 1 {
		t.Fatalf("queue wake moved %d %v, want 1 (not the bus's)", n, err)
	}
	if next, _, _ := s.NextDue(ctx); !next.Equal(later.Add(time.Hour)) {
		t.Fatalf("the bus's message was woken with the queue's: next %v", next)
	}
	sig := s.Signal("node")
	if err := s.DeadLetter(ctx, q, "expired"); err != nil {
		t.Fatal(err)
	}
	if d, _ := s.DueIn(ctx, "node", later, 0); len(d) != 0 {
		t.Fatalf("dead letter still due: %v", ids(d))
	}
	m, err := s.Replay(ctx, "q1")
	if err != nil || m.Queue != "node" {
		t.Fatalf("replay %+v %v", m, err)
	}
	select {
	case <-sig:
	default:
		t.Fatal("replay into a queue did not signal it")
	}
	if d, _ := s.DueIn(ctx, "node", clk.Now(), 0); !slices.Equal(ids(d), []string{"q1"}) {
		t.Fatalf("replayed into %v, want the node queue", ids(d))
	}
	u, err := s.QueueUsage(ctx, "node")
	if err != nil || u.Bytes != int64(len(q.Payload)) || !slices.Equal(u.Recipients, []string{"peer-x"}) {
		t.Fatalf("usage %+v %v", u, err)
	}
}

// TestQueueBounds: a queue refuses, with ErrFull and nothing written, a
// message past its per-recipient or byte bound, and frees room as
// messages leave.
func TestQueueBounds(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	put := func(id, to string, b Bounds) error {
		m := msg(id, "agent:"+to)
		m.To, m.Queue = to, "node"
		return s.EnqueueWithin(ctx, m, b)
	}
	per := Bounds{PerRecipient: 2}
	for _, id := range []string{"a1", "a2"} {
		if err := put(id, "a", per); err != nil {
			t.Fatal(err)
		}
	}
	if err := put("a3", "a", per); !errors.Is(err, ErrFull) {
		t.Fatalf("third message for a: %v, want ErrFull", err)
	}
	if err := put("b1", "b", per); err != nil {
		t.Fatalf("another recipient: %v", err)
	}
	if err := s.Delivered(ctx, "a1"); err != nil {
		t.Fatal(err)
	}
	if err := put("a3", "a", per); err != nil {
		t.Fatalf("after a delivery: %v", err)
	}
	size := int64(len(msg("x", "t").Payload))
	if err := put("c1", "c", Bounds{Bytes: 3 * size}); !errors.Is(err, ErrFull) {
		t.Fatalf("a fourth message in a three-message byte bound: %v, want ErrFull", err)
	}
	if err := put("c1", "c", Bounds{Bytes: 4 * size}); err != nil {
		t.Fatal(err)
	}
	if u, _ := s.QueueUsage(ctx, "node"); u.Bytes != 4*size {
		t.Fatalf("usage %d bytes, want %d", u.Bytes, 4*size)
	}
	if err := s.EnqueueWithin(ctx, msg("z", "t"), per); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bounds on the bus's outbox: %v, want ErrInvalid", err)
	}
}

// TestPendingForPagesOneRecipient: PendingFor reads one recipient's
// messages of one queue in enqueue order, page by page, and its cursor
// survives the deletion of the message it points at.
func TestPendingForPagesOneRecipient(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	for _, m := range []struct{ id, to, queue string }{
		{"a1", "x", "mbx"}, {"b1", "y", "mbx"}, {"a2", "x", "mbx"}, {"n1", "x", "node"}, {"a3", "x", "mbx"},
	} {
		q := msg(m.id, "agent:"+m.to)
		q.To, q.Queue = m.to, m.queue
		if err := s.EnqueueWithin(ctx, q, Bounds{}); err != nil {
			t.Fatal(err)
		}
	}
	page, cur, err := s.PendingFor(ctx, "mbx", "x", 0, 2)
	if err != nil || !slices.Equal(ids(page), []string{"a1", "a2"}) {
		t.Fatalf("first page %v %v", ids(page), err)
	}
	if err := s.Delivered(ctx, "a2"); err != nil {
		t.Fatal(err)
	}
	page, cur, err = s.PendingFor(ctx, "mbx", "x", cur, 2)
	if err != nil || !slices.Equal(ids(page), []string{"a3"}) {
		t.Fatalf("second page %v %v", ids(page), err)
	}
	if page, _, err = s.PendingFor(ctx, "mbx", "x", cur, 2); err != nil || len(page) != 0 {
		t.Fatalf("past the end %v %v", ids(page), err)
	}
}

// TestEnqueueWithinBoundsRecipientBytes: PerRecipientBytes refuses a
// message that would take one recipient past it, not another recipient.
func TestEnqueueWithinBoundsRecipientBytes(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	one := msg("r1", "agent:x")
	one.To, one.Queue = "x", "mbx"
	b := Bounds{PerRecipientBytes: int64(len(one.Payload)) + 1}
	if err := s.EnqueueWithin(ctx, one, b); err != nil {
		t.Fatal(err)
	}
	two := msg("r2", "agent:x")
	two.To, two.Queue = "x", "mbx"
	if err := s.EnqueueWithin(ctx, two, b); !errors.Is(err, ErrFull) {
		t.Fatalf("second message for x: %v, want ErrFull", err)
	}
	two.To = "y"
	if err := s.EnqueueWithin(ctx, two, b); err != nil {
		t.Fatalf("a message for y: %v", err)
	}
}

// TestEnqueueWithinBoundsPerSender: PerSender and PerSenderBytes refuse a
// message that would take one sender's share of a recipient past them,
// while other senders still reach that recipient and the sender still
// reaches others.
func TestEnqueueWithinBoundsPerSender(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	put := func(id, from, to string, b Bounds) error {
		m := msg(id, "agent:"+to)
		m.From, m.To, m.Queue = from, to, "mbx"
		return s.EnqueueWithin(ctx, m, b)
	}
	count := Bounds{PerRecipient: 10, PerSender: 2}
	for i, from := range []string{"a", "a", "b"} {
		if err := put(fmt.Sprint("c", i), from, "x", count); err != nil {
			t.Fatalf("message %d from %s: %v", i, from, err)
		}
	}
	if err := put("c3", "a", "x", count); !errors.Is(err, ErrFull) {
		t.Fatalf("a's third message for x: %v, want ErrFull", err)
	}
	if err := put("c4", "b", "x", count); err != nil {
		t.Fatalf("b's second message for x: %v", err)
	}
	if err := put("c5", "a", "y", count); err != nil {
		t.Fatalf("a's first message for y: %v", err)
	}
	size := int64(len(msg("", "").Payload))
	bytes := Bounds{PerSenderBytes: size + 1}
	if err := put("b0", "a", "z", bytes); err != nil {
		t.Fatal(err)
	}
	if err := put("b1", "a", "z", bytes); !errors.Is(err, ErrFull) {
		t.Fatalf("a's second message for z past its bytes: %v, want ErrFull", err)
	}
	if err := put("b2", "b", "z", bytes); err != nil {
		t.Fatalf("b's message for z: %v", err)
	}
}
