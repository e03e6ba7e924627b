package pubsub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

// durableReader collects what a durable subscription delivers.
type durableReader struct {
	mu  sync.Mutex
	got []Message
}

func (r *durableReader) take(_ context.Context, m Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, m)
	return nil
}

func (r *durableReader) numbers() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]int, 0, len(r.got))
	for _, m := range r.got {
		var p struct{ N int }
		_ = json.Unmarshal(m.Payload, &p)
		out = append(out, p.N)
	}
	return out
}

func (r *durableReader) waitFor(t *testing.T, n int) {
	t.Helper()
	wait.For(t, 20*time.Second, func() error {
		if got := r.numbers(); len(got) < n {
			return fmt.Errorf("%d of %d messages", len(got), n)
		}
		return nil
	})
}

// publishN publishes messages from to to-1, each once kept reports it
// has the one before: a burst could overflow GossipSub's per-peer queues
// (32 messages), which drop rather than wait.
func publishN(t *testing.T, b *Topics, archive *memArchive, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if _, err := b.Publish(context.Background(), fmt.Sprintf("news:%d", i%3), json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
		// Bounded generously: under the race detector with other packages'
		// tests on two cores a message has taken more than 10 s to reach
		// the keeper (gossip repair, after a heartbeat or more).
		wait.For(t, 30*time.Second, func() error {
			if n := archive.Len(); n <= i {
				return fmt.Errorf("the keeper has %d of %d", n, i+1)
			}
			return nil
		})
	}
}

// TestDurableCatchUp: a keeper, a publisher, and a durable subscriber that
// goes offline while messages are published, then comes back under its
// name: it catches up in order, with nothing lost or doubled, then goes
// on live.
func TestDurableCatchUp(t *testing.T) {
	archive := newMemArchive()
	kh, ph := newHost(t), newHost(t)
	keeper := newBus(t, kh, WithArchive(archive, "news:*"))
	pub := newBus(t, ph)
	_ = keeper
	connect(t, ph, kh)
	// The publisher joins the family, so that it lists the family's peers.
	_ = collect(t, pub, "news:*")
	positions := &memPositions{}

	// Online: live messages arrive.
	sh := newHost(t)
	sub := newBus(t, sh, WithPositions(positions))
	connect(t, sh, kh)
	connect(t, sh, ph)
	r1 := &durableReader{}
	ctx := context.Background()
	d, err := sub.SubscribeDurable(ctx, "news:*", "reader", r1.take)
	if err != nil {
		t.Fatal(err)
	}
	seesBoth(t, pub)
	publishN(t, pub, archive, 0, 5)
	r1.waitFor(t, 5)
	d.Cancel()
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sh.Close(); err != nil {
		t.Fatal(err)
	}

	// Offline: published meanwhile, and kept.
	publishN(t, pub, archive, 5, 45)

	// Back under the same name: the catch-up, then live.
	sh2 := newHost(t)
	sub2 := newBus(t, sh2, WithPositions(positions))
	connect(t, sh2, kh)
	connect(t, sh2, ph)
	r2 := &durableReader{}
	d2, err := sub2.SubscribeDurable(ctx, "news:*", "reader", r2.take)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Cancel()
	r2.waitFor(t, 40)
	if n := d2.CaughtUp(); n != 40 {
		t.Errorf("caught up %d, want 40", n)
	}
	r2.mu.Lock()
	caught := append([]Message(nil), r2.got...)
	r2.mu.Unlock()
	for i := 1; i < len(caught); i++ {
		if compareMessages(caught[i-1], caught[i]) >= 0 {
			t.Fatalf("catch-up out of order at %d", i)
		}
	}
	wait.For(t, 10*time.Second, func() error {
		if !strings.Contains(fmt.Sprint(pub.Peers("news:0")), sh2.ID().String()) {
			return errors.New("the publisher does not see the subscriber back yet")
		}
		return nil
	})
	publishN(t, pub, archive, 45, 50)
	r2.waitFor(t, 45)
	// The settle fetch after going live must not deliver anything again.
	wait.Holds(t, settleAfter+time.Second, func() error {
		if n := len(r2.numbers()); n != 45 {
			return fmt.Errorf("%d messages, want 45", n)
		}
		return nil
	})
	seen := map[int]bool{}
	for _, n := range append(r1.numbers(), r2.numbers()...) {
		if seen[n] {
			t.Errorf("message %d delivered twice", n)
		}
		seen[n] = true
	}
	for i := range 50 {
		if !seen[i] {
			t.Errorf("message %d lost", i)
		}
	}
}

func TestDurableRefusals(t *testing.T) {
	h := newHost(t)
	none := newBus(t, h)
	if _, err := none.SubscribeDurable(context.Background(), "news:*", "r", func(context.Context, Message) error { return nil }); !errors.Is(err, ErrDurable) {
		t.Errorf("without positions: %v, want ErrDurable", err)
	}
	positions := &memPositions{}
	b := newBus(t, newHost(t), WithPositions(positions), WithFetchWait(100*time.Millisecond))
	d, err := b.SubscribeDurable(context.Background(), "news:*", "r", func(context.Context, Message) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SubscribeDurable(context.Background(), "news:*", "r", func(context.Context, Message) error { return nil }); !errors.Is(err, ErrDurable) {
		t.Errorf("a name in use: %v, want ErrDurable", err)
	}
	d.Cancel()
	if _, err := b.SubscribeDurable(context.Background(), "other:*", "r", func(context.Context, Message) error { return nil }); !errors.Is(err, ErrDurable) {
		t.Errorf("another pattern: %v, want ErrDurable", err)
	}
	if _, err := b.SubscribeDurable(context.Background(), "news:*", "r", func(context.Context, Message) error { return nil }); !errors.Is(err, ErrNoKeepers) {
		t.Errorf("resume with no keeper: %v, want ErrNoKeepers", err)
	}
}

// TestDurableNamesBounded: a node keeps positions for a bounded number of
// names; a new name past it is refused (ErrTooManyDurables, an
// ErrDurable) before anything is delivered, and ForgetDurable of a name
// not in use makes room.
func TestDurableNamesBounded(t *testing.T) {
	positions := &memPositions{max: 2}
	b := newBus(t, newHost(t), WithPositions(positions), WithFetchWait(100*time.Millisecond))
	nop := func(context.Context, Message) error { return nil }
	ctx := context.Background()
	a, err := b.SubscribeDurable(ctx, "news:*", "a", nop)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SubscribeDurable(ctx, "news:*", "b", nop); err != nil {
		t.Fatal(err)
	}
	_, err = b.SubscribeDurable(ctx, "news:*", "c", nop)
	if !errors.Is(err, ErrTooManyDurables) || !errors.Is(err, ErrDurable) {
		t.Fatalf("a third name: %v, want ErrTooManyDurables", err)
	}
	if _, err := b.ForgetDurable(ctx, "a"); !errors.Is(err, ErrDurable) {
		t.Fatalf("forgetting a name in use: %v, want ErrDurable", err)
	}
	a.Cancel()
	if ok, err := b.ForgetDurable(ctx, "a"); err != nil || !ok {
		t.Fatalf("forget: %v %v, want true", ok, err)
	}
	if ok, err := b.ForgetDurable(ctx, "a"); err != nil || ok {
		t.Fatalf("forget again: %v %v, want false", ok, err)
	}
	c, err := b.SubscribeDurable(ctx, "other:*", "c", nop)
	if err != nil {
		t.Fatalf("a new name after a forget: %v", err)
	}
	c.Cancel()
	if _, err := b.SubscribeDurable(ctx, "other:*", "a", nop); !errors.Is(err, ErrTooManyDurables) {
		t.Fatalf("a forgotten name with the bound reached again: %v, want ErrTooManyDurables", err)
	}
	// A forgotten name starts afresh, under another pattern, with no
	// keeper to catch up from.
	if _, err := b.ForgetDurable(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	a, err = b.SubscribeDurable(ctx, "other:*", "a", nop)
	if err != nil {
		t.Fatalf("a forgotten name: %v", err)
	}
	a.Cancel()
}

// TestDurablesList: Durables lists the names kept, sorted, with their
// positions' sizes, and says which one runs now; a name forgotten is gone.
func TestDurablesList(t *testing.T) {
	positions := &memPositions{}
	b := newBus(t, newHost(t), WithPositions(positions), WithFetchWait(100*time.Millisecond))
	nop := func(context.Context, Message) error { return nil }
	ctx := context.Background()
	if got, err := b.Durables(ctx); err != nil || len(got) != 0 {
		t.Fatalf("Durables before any: %v %v, want none", got, err)
	}
	z, err := b.SubscribeDurable(ctx, "news:*", "zed", nop)
	if err != nil {
		t.Fatal(err)
	}
	a, err := b.SubscribeDurable(ctx, "news:*", "ann", nop)
	if err != nil {
		t.Fatal(err)
	}
	a.Cancel()
	got, err := b.Durables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Name != "ann" || got[0].Active || got[1].Name != "zed" || !got[1].Active {
		t.Fatalf("Durables = %+v, want ann (not running) then zed (running)", got)
	}
	for _, d := range got {
		raw, _ := positions.Position(ctx, d.Name)
		if d.Bytes != len(raw) || d.Bytes == 0 {
			t.Fatalf("%s: %d bytes, its position has %d", d.Name, d.Bytes, len(raw))
		}
	}
	z.Cancel()
	if _, err := b.ForgetDurable(ctx, "ann"); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Durables(ctx); err != nil || len(got) != 1 || got[0].Name != "zed" || got[0].Active {
		t.Fatalf("Durables after forgetting ann and cancelling zed: %+v %v", got, err)
	}
	none := newBus(t, newHost(t))
	if _, err := none.Durables(ctx); !errors.Is(err, ErrDurable) {
		t.Fatalf("Durables on a node keeping no positions: %v, want ErrDurable", err)
	}
}

func TestParseHistoryQuery(t *testing.T) {
	good := `{"pattern":"news:*","since":"2026-01-02T03:04:05.006Z","until":"2026-01-03T00:00:00Z","cursor":"ab","limit":10}`
	q, err := ParseHistoryQuery([]byte(good))
	if err != nil || q.Pattern != "news:*" || q.Limit != 10 || q.Cursor != "ab" || q.Since.Nanosecond() != 6_000_000 {
		t.Fatalf("ParseHistoryQuery(%s) = %+v, %v", good, q, err)
	}
	for _, bad := range []string{
		``, `[]`, `{}`, `{"pattern":"*"}`, `{"pattern":"news:*","limit":1001}`, `{"pattern":"news:*","limit":-1}`,
		`{"pattern":"news:*","extra":1}`, `{"pattern":"news:*","pattern":"other"}`, `{"pattern":"news:*"} {}`,
		`{"pattern":"news:*","since":"yesterday"}`, `{"pattern":"news:*","limit":"10"}`,
		`{"pattern":"news:*","since":"2026-01-02T00:00:00Z","until":"2026-01-01T00:00:00Z"}`,
		`{"pattern":"news:[","limit":1}`,
		`{"pattern":"news:*","since":"0001-01-01T00:00:01Z"}`, `{"pattern":"news:*","until":"9999-12-31T23:59:59Z"}`,
		`{"pattern":"news:*","since":"1600-01-01T00:00:00Z","until":"2026-01-01T00:00:00Z"}`,
	} {
		if _, err := ParseHistoryQuery([]byte(bad)); !errors.Is(err, ErrInvalidQuery) {
			t.Errorf("ParseHistoryQuery(%s) = %v, want ErrInvalidQuery", bad, err)
		}
	}
}

func FuzzParseHistoryQuery(f *testing.F) {
	f.Add([]byte(`{"pattern":"news:*","since":"2026-01-02T03:04:05Z","cursor":"00","limit":10}`))
	f.Add([]byte(`{"pattern":"a","pattern":"b"}`))
	f.Add([]byte(`{"pattern":"x.y","until":"2026-01-02T03:04:05+01:00"}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		q, err := ParseHistoryQuery(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalidQuery) {
				t.Fatalf("error %v does not wrap ErrInvalidQuery", err)
			}
			return
		}
		// What parses is a query a keeper can serve, and survives a
		// round trip.
		if q.check() != nil {
			t.Fatalf("accepted %+v that check refuses", q)
		}
		again, err := ParseHistoryQuery(must(json.Marshal(q)))
		if err != nil || again.Pattern != q.Pattern || again.Limit != q.Limit || !again.Since.Equal(q.Since) || again.Cursor != q.Cursor {
			t.Fatalf("round trip of %+v: %+v, %v", q, again, err)
		}
	})
}

// TestDurableRefused: a handler that refuses a message stops the
// subscription there; the next subscription of the name gets that
// message again, then the rest, in order, and nothing it took before.
func TestDurableRefused(t *testing.T) {
	archive := newMemArchive()
	kh, ph, sh := newHost(t), newHost(t), newHost(t)
	_ = newBus(t, kh, WithArchive(archive, "news:*"))
	pub := newBus(t, ph)
	connect(t, ph, kh)
	_ = collect(t, pub, "news:*")
	sub := newBus(t, sh, WithPositions(&memPositions{}))
	connect(t, sh, kh)
	connect(t, sh, ph)
	r1 := &durableReader{}
	refusal := errors.New("not now")
	d, err := sub.SubscribeDurable(context.Background(), "news:*", "reader", func(ctx context.Context, m Message) error {
		var p struct{ N int }
		_ = json.Unmarshal(m.Payload, &p)
		if p.N == 2 {
			return refusal
		}
		return r1.take(ctx, m)
	})
	if err != nil {
		t.Fatal(err)
	}
	seesBoth(t, pub)
	// Each phase is published once the one before it has been taken:
	// GossipSub validates messages concurrently, so two published back
	// to back may reach a subscriber in either order, and the live
	// subscription delivers them as they come.
	publishN(t, pub, archive, 0, 2)
	r1.waitFor(t, 2)
	publishN(t, pub, archive, 2, 3)
	wait.For(t, 10*time.Second, func() error {
		if !errors.Is(d.Halted(), refusal) {
			return errors.New("not halted yet")
		}
		return nil
	})
	publishN(t, pub, archive, 3, 6)
	wait.Holds(t, time.Second, func() error {
		if got := fmt.Sprint(r1.numbers()); got != "[0 1]" {
			return fmt.Errorf("before the refusal and after it: %s, want [0 1]", got)
		}
		return nil
	})
	d.Cancel()

	r2 := &durableReader{}
	d2, err := sub.SubscribeDurable(context.Background(), "news:*", "reader", r2.take)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Cancel()
	r2.waitFor(t, 4)
	wait.Holds(t, time.Second, func() error {
		if got := fmt.Sprint(r2.numbers()); got != "[2 3 4 5]" {
			return fmt.Errorf("after the refusal: %s, want [2 3 4 5]", got)
		}
		return nil
	})
}

// TestDurableSlowHandler: live messages that arrive while the handler
// holds one wait for it, in order, none lost; the handler's ctx ends at
// Cancel.
func TestDurableSlowHandler(t *testing.T) {
	archive := newMemArchive()
	kh, ph, sh := newHost(t), newHost(t), newHost(t)
	_ = newBus(t, kh, WithArchive(archive, "news:*"))
	pub := newBus(t, ph)
	connect(t, ph, kh)
	_ = collect(t, pub, "news:*")
	sub := newBus(t, sh, WithPositions(&memPositions{}), WithQueueSize(2))
	connect(t, sh, kh)
	connect(t, sh, ph)
	r := &durableReader{}
	holding, release := make(chan struct{}), make(chan struct{})
	d, err := sub.SubscribeDurable(context.Background(), "news:*", "reader", func(ctx context.Context, m Message) error {
		if len(r.numbers()) == 0 {
			close(holding)
			<-release
		}
		return r.take(ctx, m)
	})
	if err != nil {
		t.Fatal(err)
	}
	seesBoth(t, pub)
	publishN(t, pub, archive, 0, 1)
	closed(t, holding)
	publishN(t, pub, archive, 1, 10)
	wait.For(t, 10*time.Second, func() error {
		if sub.held.Load() == 0 {
			return errors.New("the live messages are not counted as held")
		}
		return nil
	})
	close(release)
	r.waitFor(t, 10)
	if got := fmt.Sprint(r.numbers()); got != "[0 1 2 3 4 5 6 7 8 9]" {
		t.Errorf("took %s, want 0 to 9 in order", got)
	}

	// A handler waiting on its ctx returns when the subscription ends.
	blocked := make(chan struct{})
	d.Cancel()
	d2, err := sub.SubscribeDurable(context.Background(), "news:*", "reader", func(ctx context.Context, m Message) error {
		close(blocked)
		<-ctx.Done()
		return ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	publishN(t, pub, archive, 10, 11)
	closed(t, blocked)
	d2.Cancel()
	if got := sub.held.Load(); got != 0 {
		t.Errorf("%d bytes counted as held after every subscription ended", got)
	}
}

// closed waits for ch to be closed.
func closed(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	wait.For(t, 10*time.Second, func() error {
		select {
		case <-ch:
			return nil
		default:
			return errors.New("not yet")
		}
	})
}

// TestDurableHeldBytes: the live messages held for a handler slower than
// the topic are bounded in bytes as well as in number, per subscription
// (maxPendingBytes) and for all of a node's (maxHeldBytes): past either
// they are left to a fetch (gap), so that stuck handlers on busy topics
// of large messages hold at most that much; what a subscription held is
// released from the node's count when it lets it go.
func TestDurableHeldBytes(t *testing.T) {
	b := &Topics{}
	newDurable := func() *Durable {
		return &Durable{b: b, ctx: context.Background(), wake: make(chan struct{}, 1)}
	}
	big := Message{Payload: make([]byte, 512<<10)}
	d := newDurable()
	for range 2 * maxPendingBytes / len(big.Payload) {
		d.live(big)
	}
	if d.held > maxPendingBytes || int64(len(d.pending))*heldSize(big) != d.held {
		t.Fatalf("held %d bytes in %d messages, the bound is %d", d.held, len(d.pending), maxPendingBytes)
	}
	if !d.gap {
		t.Fatal("messages past the bound were dropped without a fetch to follow (no gap)")
	}
	ds := []*Durable{d}
	for range 2 * maxHeldBytes / maxPendingBytes {
		d := newDurable()
		for range maxPendingBytes / len(big.Payload) {
			d.live(big)
		}
		ds = append(ds, d)
	}
	if got := b.held.Load(); got > maxHeldBytes {
		t.Fatalf("the node's durables hold %d bytes, the bound is %d", got, maxHeldBytes)
	}
	if last := ds[len(ds)-1]; !last.gap || len(last.pending) != 0 {
		t.Fatalf("a subscription past the node's bound holds %d messages, gap %v", len(last.pending), last.gap)
	}
	var sum int64
	for _, d := range ds {
		sum += d.held
	}
	if sum != b.held.Load() {
		t.Fatalf("the node counts %d bytes held, its subscriptions %d", b.held.Load(), sum)
	}
	for _, d := range ds {
		d.mu.Lock()
		d.dropHeld()
		d.mu.Unlock()
	}
	if got := b.held.Load(); got != 0 {
		t.Fatalf("%d bytes still counted once every subscription let go", got)
	}
}

// seesBoth waits until pub has the keeper and the subscriber as topic
// peers of news:0, so that what it publishes next reaches both.
func seesBoth(t *testing.T, pub *Topics) {
	t.Helper()
	wait.For(t, 10*time.Second, func() error {
		if len(pub.Peers("news:0")) < 2 {
			return errors.New("the publisher does not see both subscribers yet")
		}
		return nil
	})
}
