package pubsub

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// Bounds of durable subscriptions.
const (
	// MaxDurableName bounds a durable subscription's name, in bytes.
	MaxDurableName = 256
	// maxSeen bounds the delivered messages a position remembers; past
	// it the floor rises (see the package doc, Durable subscriptions).
	maxSeen = 4096
	// maxPending and maxPendingBytes bound the live messages held for a
	// handler slower than the topic; past them they are dropped and
	// fetched again by another round. A held message counts its payload
	// and heldOverhead (the rest of its envelope and the Message).
	maxPending      = 65536
	maxPendingBytes = 32 << 20
	heldOverhead    = 1 << 10
	// maxHeldBytes bounds the live messages all durable subscriptions of
	// a node hold, counted as for maxPendingBytes.
	maxHeldBytes = 256 << 20
	// settleAfter is when a durable subscription fetches once more after
	// going live, for what reached keepers but not it while its own
	// subscription joined the mesh.
	settleAfter = 2 * time.Second
	// maxRounds bounds the fetches of one catch-up.
	maxRounds = 5
	// saveTimeout bounds the last save of a position at Cancel.
	saveTimeout = 5 * time.Second
)

// DurableHandler processes a message of a durable subscription. It is
// called one message at a time, in order, and the message counts as
// delivered (its position advances) only when it returns nil. An error
// means the message was not processed: the subscription then delivers
// nothing more, and a later SubscribeDurable of its name delivers that
// message again, then the rest. ctx ends when the subscription is
// cancelled; a handler waiting on something else must stop then.
type DurableHandler func(ctx context.Context, m Message) error

// Durable is a durable subscription (SubscribeDurable).
type Durable struct {
	b        *Topics
	name     string
	handler  DurableHandler
	lookback time.Duration
	ctx      context.Context // the handler's: ends at Cancel
	stop     context.CancelFunc

	mu      sync.Mutex // guards what follows
	pos     *position
	fetched []Message // the first catch-up's, not yet delivered
	again   bool      // the first catch-up was truncated: fetch again
	pending []Message // live messages not yet delivered
	held    int64     // pending's size, as heldSize counts it
	gap     bool      // pending overflowed: fetch again
	drops   uint64    // the live subscription's drops already fetched for
	inner   *Subscription
	caught  int
	halted  error // the handler's error: nothing more is delivered
	started bool  // pump and run were started

	wake     chan struct{}
	dirty    chan struct{}
	done     chan struct{}
	pumped   chan struct{} // closed when pump returns
	stopped  chan struct{} // closed when run returns
	stopOnce sync.Once
}

// SubscribeDurable is Subscribe under a name that outlives the
// subscription: the position reached (which messages the handler took)
// is saved in the node's Positions, and a later SubscribeDurable of the
// same name first delivers what was published since, fetched from
// history keepers (FetchHistory), in order (envelope time, then id), then
// the live messages, none lost across the switch. The first
// subscription of a name starts from now. A name follows one pattern;
// another pattern under it is refused, and so is a name in use on this
// node. The first fetch of a resume runs before SubscribeDurable returns,
// within ctx; when it finds no keeper the subscription is refused
// (wrapping ErrNoKeepers) and its position kept for a later try. The
// handler is called after SubscribeDurable returns, on a goroutine of the
// subscription's own. See the package doc, Durable subscriptions.
func (tp *Topics) SubscribeDurable(ctx context.Context, pattern, name string, handler DurableHandler) (*Durable, error) {
	fam := Family(pattern)
	switch {
	case tp.cfg.pos == nil:
		return nil, fmt.Errorf("%w: this node keeps no positions", ErrDurable)
	case name == "" || len(name) > MaxDurableName:
		return nil, fmt.Errorf("%w: a name of 1 to %d bytes is required", ErrDurable, MaxDurableName)
	case fam == "" || hasWild(fam) || !validPattern(pattern):
		return nil, fmt.Errorf("%w: %q (the family, before the first ':' or '.', must be literal)", ErrPattern, pattern)
	case handler == nil:
		return nil, fmt.Errorf("%w: a handler is required", ErrDurable)
	}
	d := &Durable{b: tp, name: name, handler: handler, lookback: 2 * tp.cfg.guard.Window(),
		wake: make(chan struct{}, 1), dirty: make(chan struct{}, 1), done: make(chan struct{}),
		pumped: make(chan struct{}), stopped: make(chan struct{})}
	d.ctx, d.stop = context.WithCancel(tp.ctx)
	tp.mu.Lock()
	switch {
	case tp.closed:
		tp.mu.Unlock()
		return nil, ErrClosed
	case tp.durables[name] != nil:
		tp.mu.Unlock()
		return nil, fmt.Errorf("%w: %q is in use on this node", ErrDurable, name)
	}
	tp.durables[name] = d
	tp.mu.Unlock()
	ok := false
	defer func() {
		if !ok {
			d.stop()
			d.mu.Lock()
			d.dropHeld()
			d.mu.Unlock()
			tp.mu.Lock()
			if tp.durables[name] == d {
				delete(tp.durables, name)
			}
			tp.mu.Unlock()
		}
	}()
	raw, err := tp.cfg.pos.Position(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("pubsub: durable %q: %w", name, err)
	}
	resume := raw != nil
	if resume {
		if d.pos, err = decodePosition(raw); err != nil {
			return nil, fmt.Errorf("pubsub: durable %q: saved position: %w", name, err)
		}
		if d.pos.pattern != pattern {
			return nil, fmt.Errorf("%w: %q follows %q, not %q; use another name", ErrDurable, name, d.pos.pattern, pattern)
		}
	} else {
		d.pos = &position{pattern: pattern, floor: time.Now(), seen: map[seenKey]time.Time{}}
		// Saved before anything is delivered: a name the node cannot keep
		// is refused now (ErrTooManyDurables), not lost at the first save.
		raw, err := d.pos.encode()
		if err == nil {
			err = tp.cfg.pos.SavePosition(ctx, name, raw)
		}
		if err != nil {
			return nil, fmt.Errorf("pubsub: durable %q: %w", name, err)
		}
	}
	// Live messages are held from now on, so that none published during
	// the catch-up is missed.
	inner, err := tp.subscribe(fam, pattern, false, d.live)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.inner = inner
	d.mu.Unlock()
	if resume {
		msgs, st, err := tp.FetchHistory(ctx, pattern, d.pos.floor)
		if err != nil {
			inner.Cancel()
			return nil, fmt.Errorf("pubsub: durable %q cannot catch up: %w", name, err)
		}
		d.mu.Lock()
		d.fetched, d.again = msgs, st.Truncated
		d.mu.Unlock()
	}
	if !tp.track(2) {
		inner.Cancel()
		return nil, ErrClosed
	}
	ok = true
	d.mu.Lock()
	d.started = true
	d.mu.Unlock()
	d.markDirty()
	go d.pump()
	go d.run()
	return d, nil
}

// ForgetDurable deletes the position saved for the durable subscription
// name, so that the node keeps no more for it and a later
// SubscribeDurable of the name starts from now, following any pattern.
// It reports whether there was a position. A name in use on this node is
// refused (wrapping ErrDurable): cancel its subscription first.
func (tp *Topics) ForgetDurable(ctx context.Context, name string) (bool, error) {
	if tp.cfg.pos == nil {
		return false, fmt.Errorf("%w: this node keeps no positions", ErrDurable)
	}
	// Under the lock, so that no SubscribeDurable of the name starts
	// meanwhile and saves it again.
	tp.mu.Lock()
	defer tp.mu.Unlock()
	switch {
	case tp.closed:
		return false, ErrClosed
	case tp.durables[name] != nil:
		return false, fmt.Errorf("%w: %q is in use on this node; cancel its subscription first", ErrDurable, name)
	}
	ok, err := tp.cfg.pos.ForgetPosition(ctx, name)
	if err != nil {
		return false, fmt.Errorf("pubsub: forget durable %q: %w", name, err)
	}
	return ok, nil
}

// Durables lists the durable subscription names whose position the node
// keeps, sorted by name, each saying whether a subscription of it runs
// now. The list is as long as Positions keeps names (node's store: at most
// 256).
func (tp *Topics) Durables(ctx context.Context) ([]protocol.DurableInfo, error) {
	if tp.cfg.pos == nil {
		return nil, fmt.Errorf("%w: this node keeps no positions", ErrDurable)
	}
	saved, err := tp.cfg.pos.ListPositions(ctx)
	if err != nil {
		return nil, fmt.Errorf("pubsub: list durables: %w", err)
	}
	out := make([]protocol.DurableInfo, len(saved))
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.closed {
		return nil, ErrClosed
	}
	for i, p := range saved {
		out[i] = protocol.DurableInfo{Name: p.Name, Bytes: p.Bytes, Active: tp.durables[p.Name] != nil}
	}
	return out, nil
}

// CaughtUp returns how many fetched messages were delivered.
func (d *Durable) CaughtUp() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.caught
}

// Halted returns the handler's error that stopped the subscription, or
// nil.
func (d *Durable) Halted() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.halted
}

// live takes a message of the live subscription, without waiting for
// the handler: a handler slower than the topic gets the surplus by a
// fetch instead (pending overflowed).
func (d *Durable) live(m Message) {
	d.mu.Lock()
	switch {
	case d.halted != nil, d.ctx.Err() != nil:
	case len(d.pending) >= maxPending || d.held+heldSize(m) > maxPendingBytes:
		d.gap = true
	case d.b.held.Add(heldSize(m)) > maxHeldBytes:
		d.b.held.Add(-heldSize(m))
		d.gap = true
	default:
		d.pending = append(d.pending, m)
		d.held += heldSize(m)
	}
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// dropHeld forgets the held live messages and their bytes in the node's
// count; d.mu held.
func (d *Durable) dropHeld() {
	d.b.held.Add(-d.held)
	d.pending, d.held = nil, 0
}

// heldSize is what a held live message counts against maxPendingBytes
// and maxHeldBytes.
func heldSize(m Message) int64 {
	return int64(len(m.Payload) + heldOverhead)
}

// pump delivers, one message at a time: the first catch-up's messages,
// then the live ones, fetching again whenever live messages were lost
// on the way (pending overflowed, the subscription's queue dropped some)
// and once settleAfter after the first catch-up.
func (d *Durable) pump() {
	defer d.b.wg.Done()
	defer close(d.pumped)
	// The pump ends cancelled or halted, after which live holds nothing
	// more: what it held is released from the node's count.
	defer func() {
		d.mu.Lock()
		d.dropHeld()
		d.mu.Unlock()
	}()
	d.mu.Lock()
	fetched, again := d.fetched, d.again
	d.fetched = nil
	d.mu.Unlock()
	if !d.deliverAll(fetched, true) {
		return
	}
	for round := 1; again && round < maxRounds; round++ {
		var ok bool
		if again, ok = d.fetch(); !ok {
			return
		}
	}
	settle := time.NewTimer(settleAfter)
	defer settle.Stop()
	// retry paces fetches for lost messages after one failed.
	retry := time.NewTimer(0)
	defer retry.Stop()
	retrying := false
	for {
		d.mu.Lock()
		batch := d.pending
		d.dropHeld()
		lost := d.gap || d.inner.Dropped() != d.drops
		d.mu.Unlock()
		// Held messages go out in envelope order; those a fetch
		// delivered meanwhile are skipped.
		slices.SortStableFunc(batch, compareMessages)
		if !d.deliverAll(batch, false) {
			return
		}
		if lost && !retrying {
			if _, ok := d.fetch(); !ok {
				return
			}
			d.mu.Lock()
			failed := d.gap
			d.mu.Unlock()
			if !failed {
				continue
			}
			retrying = true
			retry.Reset(settleAfter)
		}
		select {
		case <-d.done:
			return
		case <-d.wake:
		case <-retry.C:
			retrying = false
		case <-settle.C:
			// What reached keepers but not this node while its
			// subscription joined the mesh comes late, once.
			if _, ok := d.fetch(); !ok {
				return
			}
		}
	}
}

// fetch fetches what was published since the floor and delivers it. It
// reports whether the fetch was truncated, and false when the pump must
// stop. When a fetch for lost live messages fails, the loss stays
// recorded and the next pass fetches again.
func (d *Durable) fetch() (truncated, ok bool) {
	d.mu.Lock()
	since := d.pos.floor
	lost := d.gap || d.inner.Dropped() != d.drops
	d.gap = false
	d.drops = d.inner.Dropped()
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(d.ctx, settleAfter+d.b.cfg.fetchWait)
	msgs, st, err := d.b.FetchHistory(ctx, d.pos.pattern, since)
	cancel()
	if err != nil {
		// What was lost stays to fetch: the next pass tries again.
		d.mu.Lock()
		d.gap = d.gap || lost
		d.mu.Unlock()
		return false, d.ctx.Err() == nil
	}
	return st.Truncated, d.deliverAll(msgs, true)
}

// deliverAll delivers msgs in order and reports false once the
// subscription is cancelled or halted.
func (d *Durable) deliverAll(msgs []Message, fetched bool) bool {
	for _, m := range msgs {
		if !d.deliver(m, fetched) {
			return false
		}
	}
	return d.ctx.Err() == nil
}

// deliver hands m to the handler unless it is behind the position, and
// records it once the handler took it. A fetched message older than the
// floor is behind; a live one is delivered (the topic validator has
// already dropped repeats). It reports false once the subscription is
// cancelled or halted.
func (d *Durable) deliver(m Message, fetched bool) bool {
	ts, err := m.Envelope.Time()
	if err != nil {
		return true
	}
	k := seenKey{m.Envelope.ID, m.From}
	d.mu.Lock()
	behind := d.pos.delivered(k, ts) && (fetched || !ts.Before(d.pos.floor))
	d.mu.Unlock()
	if behind {
		return true
	}
	if d.ctx.Err() != nil {
		return false
	}
	if err := d.handler(d.ctx, m); err != nil {
		if d.ctx.Err() == nil {
			d.mu.Lock()
			d.halted = err
			d.dropHeld()
			d.gap = false
			d.mu.Unlock()
		}
		return false
	}
	d.mu.Lock()
	d.pos.add(k, ts, d.lookback)
	if fetched {
		d.caught++
	}
	d.mu.Unlock()
	d.markDirty()
	return true
}

func (d *Durable) markDirty() {
	select {
	case d.dirty <- struct{}{}:
	default:
	}
}

// run saves the position whenever it changed, one save at a time (so a
// burst of messages costs a few writes), and a last time once the pump
// has stopped.
func (d *Durable) run() {
	defer d.b.wg.Done()
	defer close(d.stopped)
	for {
		select {
		case <-d.done:
			<-d.pumped
			d.save(context.Background())
			return
		case <-d.dirty:
			d.save(d.b.ctx)
		}
	}
}

func (d *Durable) save(ctx context.Context) {
	d.mu.Lock()
	raw, err := d.pos.encode()
	d.mu.Unlock()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), saveTimeout)
	defer cancel()
	_ = d.b.cfg.pos.SavePosition(ctx, d.name, raw)
}

// Cancel stops the subscription, ending the handler's ctx, and saves its
// position once the handler has returned; a later SubscribeDurable of
// its name goes on from there.
func (d *Durable) Cancel() {
	d.stopOnce.Do(func() {
		close(d.done)
		d.stop()
		d.mu.Lock()
		inner, started := d.inner, d.started
		d.mu.Unlock()
		if inner != nil {
			inner.Cancel()
		}
		if started {
			<-d.stopped
		}
		b := d.b
		b.mu.Lock()
		if b.durables[d.name] == d {
			delete(b.durables, d.name)
		}
		b.mu.Unlock()
	})
}
