package pubsub

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Bounds of durable subscriptions.
const (
	// MaxDurableName bounds a durable subscription's name, in bytes.
	MaxDurableName = 256
	// maxSeen bounds the delivered messages a position remembers; past
	// it the floor rises (see the package doc, Durable subscriptions).
	maxSeen = 4096
	// maxPending bounds the live messages held while catching up; past
	// it they are dropped and fetched again by another round.
	maxPending = 65536
	// settleAfter is when a durable subscription fetches once more after
	// going live, for what reached keepers but not it while its own
	// subscription joined the mesh.
	settleAfter = 2 * time.Second
	// maxRounds bounds the fetches of one catch-up.
	maxRounds = 5
	// saveTimeout bounds the last save of a position at Cancel.
	saveTimeout = 5 * time.Second
)

// seenKey identifies a delivered message.
type seenKey struct {
	ID   string
	From peer.ID
}

// position is where a durable subscription is: every message with an
// envelope time before floor is behind it, and of those at or after
// floor, exactly the ones in seen were delivered.
type position struct {
	pattern string
	floor   time.Time
	seen    map[seenKey]time.Time
	latest  time.Time
}

type savedPosition struct {
	Pattern string      `json:"pattern"`
	Floor   int64       `json:"floor"`
	Seen    []savedSeen `json:"seen"`
}

type savedSeen struct {
	ID   string `json:"id"`
	From string `json:"from"`
	Time int64  `json:"t"`
}

func decodePosition(raw []byte) (*position, error) {
	var sp savedPosition
	if err := json.Unmarshal(raw, &sp); err != nil {
		return nil, err
	}
	p := &position{pattern: sp.Pattern, floor: time.Unix(0, sp.Floor), seen: make(map[seenKey]time.Time, len(sp.Seen))}
	for _, s := range sp.Seen {
		from, err := peer.Decode(s.From)
		if err != nil {
			return nil, err
		}
		t := time.Unix(0, s.Time)
		p.seen[seenKey{s.ID, from}] = t
		if t.After(p.latest) {
			p.latest = t
		}
	}
	return p, nil
}

func (p *position) encode() ([]byte, error) {
	sp := savedPosition{Pattern: p.pattern, Floor: p.floor.UnixNano(), Seen: make([]savedSeen, 0, len(p.seen))}
	for k, t := range p.seen {
		sp.Seen = append(sp.Seen, savedSeen{ID: k.ID, From: k.From.String(), Time: t.UnixNano()})
	}
	return json.Marshal(sp)
}

// delivered reports whether m is behind the position.
func (p *position) delivered(k seenKey, t time.Time) bool {
	if t.Before(p.floor) {
		return true
	}
	_, ok := p.seen[k]
	return ok
}

// add records a delivered message, then raises the floor to lookback
// before the latest time delivered, and further if seen outgrows maxSeen,
// dropping what falls behind it.
func (p *position) add(k seenKey, t time.Time, lookback time.Duration) {
	if t.Before(p.floor) {
		return // delivered live, older than the floor: nothing to remember
	}
	p.seen[k] = t
	if t.After(p.latest) {
		p.latest = t
	}
	floor := p.latest.Add(-lookback)
	if len(p.seen) > 2*maxSeen {
		times := make([]time.Time, 0, len(p.seen))
		for _, t := range p.seen {
			times = append(times, t)
		}
		slices.SortFunc(times, func(a, b time.Time) int { return b.Compare(a) })
		if t := times[maxSeen-1]; t.After(floor) {
			floor = t
		}
	}
	if !floor.After(p.floor) {
		return
	}
	p.floor = floor
	for k, t := range p.seen {
		if t.Before(floor) {
			delete(p.seen, k)
		}
	}
}

// Durable is a durable subscription (SubscribeDurable).
type Durable struct {
	b        *Topics
	name     string
	handler  func(Message)
	lookback time.Duration

	mu       sync.Mutex // serialises deliveries and guards what follows
	pos      *position
	catching bool
	pending  []Message
	gap      bool // pending overflowed
	inner    *Subscription
	caught   int
	started  bool

	dirty    chan struct{}
	done     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once
}

// SubscribeDurable is Subscribe under a name that outlives the
// subscription: the position reached (which messages were delivered) is
// saved in the node's Positions, and a later SubscribeDurable of the same
// name first fetches what was published since from history keepers
// (FetchHistory) and delivers it, in order (envelope time, then id), then
// the live messages, none twice and none lost across the switch. The
// first subscription of a name starts from now. A name follows one
// pattern; another pattern under it is refused, and so is a name in use on
// this node. The catch-up runs before SubscribeDurable returns, within
// ctx; when it finds no keeper the subscription is refused (wrapping
// ErrNoKeepers) and its position kept for a later try. See the package
// doc, Durable subscriptions.
func (b *Topics) SubscribeDurable(ctx context.Context, pattern, name string, handler func(Message)) (*Durable, error) {
	fam := Family(pattern)
	switch {
	case b.cfg.pos == nil:
		return nil, fmt.Errorf("%w: this node keeps no positions", ErrDurable)
	case name == "" || len(name) > MaxDurableName:
		return nil, fmt.Errorf("%w: a name of 1 to %d bytes is required", ErrDurable, MaxDurableName)
	case fam == "" || hasWild(fam) || !validPattern(pattern):
		return nil, fmt.Errorf("%w: %q (the family, before the first ':' or '.', must be literal)", ErrPattern, pattern)
	}
	d := &Durable{b: b, name: name, handler: handler, lookback: 2 * b.cfg.guard.Window(), catching: true,
		dirty: make(chan struct{}, 1), done: make(chan struct{}), stopped: make(chan struct{})}
	b.mu.Lock()
	switch {
	case b.closed:
		b.mu.Unlock()
		return nil, ErrClosed
	case b.durables[name] != nil:
		b.mu.Unlock()
		return nil, fmt.Errorf("%w: %q is in use on this node", ErrDurable, name)
	}
	b.durables[name] = d
	b.mu.Unlock()
	ok := false
	defer func() {
		if !ok {
			b.mu.Lock()
			if b.durables[name] == d {
				delete(b.durables, name)
			}
			b.mu.Unlock()
		}
	}()
	raw, err := b.cfg.pos.Position(ctx, name)
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
	}
	// Live messages are held from now on, so that none published during
	// the catch-up is missed.
	inner, err := b.subscribe(fam, pattern, false, d.live)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	d.inner = inner
	d.mu.Unlock()
	if resume {
		if err := d.catchUp(ctx, true); err != nil {
			inner.Cancel()
			return nil, err
		}
	}
	d.mu.Lock()
	d.goLive()
	d.mu.Unlock()
	if !b.track() {
		inner.Cancel()
		return nil, ErrClosed
	}
	ok = true
	d.mu.Lock()
	d.started = true
	d.mu.Unlock()
	d.markDirty()
	go d.run()
	return d, nil
}

// CaughtUp returns how many messages the catch-up delivered.
func (d *Durable) CaughtUp() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.caught
}

// catchUp fetches what was published since the floor and delivers it,
// again while live messages overflowed the pending queue or the fetch was
// truncated. With must set, a fetch that finds no keeper is an error.
func (d *Durable) catchUp(ctx context.Context, must bool) error {
	for round := 0; ; round++ {
		d.mu.Lock()
		since := d.pos.floor
		d.mu.Unlock()
		// Live messages the subscription's queue dropped meanwhile (its
		// handler waits while the catch-up delivers) are fetched again.
		drops := d.inner.Dropped()
		msgs, st, err := d.b.FetchHistory(ctx, d.pos.pattern, since)
		if err != nil {
			if must {
				return fmt.Errorf("pubsub: durable %q cannot catch up: %w", d.name, err)
			}
			return nil
		}
		d.mu.Lock()
		for _, m := range msgs {
			if d.deliver(m, true) {
				d.caught++
			}
		}
		again := d.gap || st.Truncated || d.inner.Dropped() != drops
		d.gap = false
		d.mu.Unlock()
		if !again || round == maxRounds-1 {
			return nil
		}
		must = false
	}
}

// goLive delivers the live messages held during the catch-up; d.mu held.
func (d *Durable) goLive() {
	slices.SortStableFunc(d.pending, compareMessages)
	for _, m := range d.pending {
		d.deliver(m, false)
	}
	d.pending, d.catching = nil, false
}

// live takes a message of the live subscription.
func (d *Durable) live(m Message) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.catching {
		if len(d.pending) >= maxPending {
			d.gap = true
			return
		}
		d.pending = append(d.pending, m)
		return
	}
	d.deliver(m, false)
}

// deliver hands m to the handler unless it was delivered; d.mu held. A
// fetched message older than the floor is behind the position; a live
// one is delivered (the topic validator has already dropped repeats).
func (d *Durable) deliver(m Message, fetched bool) bool {
	ts, err := m.Envelope.Time()
	if err != nil {
		return false
	}
	k := seenKey{m.Envelope.ID, m.From}
	if _, seen := d.pos.seen[k]; seen || fetched && ts.Before(d.pos.floor) {
		return false
	}
	select {
	case <-d.done:
		return false
	default:
	}
	d.handler(m)
	d.pos.add(k, ts, d.lookback)
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
// burst of messages costs a few writes), and fetches once more
// settleAfter after going live.
func (d *Durable) run() {
	defer d.b.wg.Done()
	defer close(d.stopped)
	settle := time.NewTimer(settleAfter)
	defer settle.Stop()
	for {
		select {
		case <-d.done:
			d.save(context.Background())
			return
		case <-d.dirty:
			d.save(d.b.ctx)
		case <-settle.C:
			// Live delivery goes on meanwhile; what this finds was
			// missed live and comes late, once.
			ctx, cancel := context.WithTimeout(d.b.ctx, settleAfter+d.b.cfg.fetchWait)
			go func() { // ends with ctx, which cancel ends below
				select {
				case <-d.done:
					cancel()
				case <-ctx.Done():
				}
			}()
			_ = d.catchUp(ctx, false)
			cancel()
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

// Cancel stops the subscription and saves its position; a later
// SubscribeDurable of its name goes on from there.
func (d *Durable) Cancel() {
	d.stopOnce.Do(func() {
		d.mu.Lock()
		close(d.done)
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
