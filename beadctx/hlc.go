package beadctx

import (
	"cmp"
	"fmt"
	"math"
	"sync"
	"time"
)

// MaxSkew bounds how far an HLC's wall time may run ahead of a clock
// that adopts it, and how far it may lie from the envelope time that
// carries it (see CheckStamp).
const MaxSkew = time.Minute

// HLC is a hybrid logical clock timestamp: wall time in Unix milliseconds
// and a counter that orders events within one millisecond.
type HLC struct {
	Wall    int64  `json:"wall"`
	Counter uint32 `json:"counter"`
}

// Compare orders a before (-1), with (0) or after (+1) b.
func (a HLC) Compare(b HLC) int {
	if c := cmp.Compare(a.Wall, b.Wall); c != 0 {
		return c
	}
	return cmp.Compare(a.Counter, b.Counter)
}

// IsZero reports whether a is the zero HLC.
func (a HLC) IsZero() bool { return a == HLC{} }

// String is "wall.counter".
func (a HLC) String() string { return fmt.Sprintf("%d.%d", a.Wall, a.Counter) }

// Clock issues HLC timestamps: each later than every one it issued or
// adopted. It is safe for concurrent use.
type Clock struct {
	mu   sync.Mutex
	last HLC
	now  func() time.Time
}

// NewClock returns a clock reading now (time.Now when nil).
func NewClock(now func() time.Time) *Clock {
	if now == nil {
		now = time.Now
	}
	return &Clock{now: now}
}

// Now returns a timestamp for a local event: the wall clock when it has
// passed the last timestamp, else the last one with its counter raised.
func (c *Clock) Now() HLC {
	c.mu.Lock()
	defer c.mu.Unlock()
	pt := c.now().UnixMilli()
	switch {
	case pt > c.last.Wall:
		c.last = HLC{Wall: pt}
	case c.last.Counter == math.MaxUint32:
		c.last = HLC{Wall: c.last.Wall + 1}
	default:
		c.last.Counter++
	}
	return c.last
}

// Observe takes in a timestamp received from another agent, so that the
// next Now is later than it. A timestamp more than MaxSkew ahead of this
// clock's wall time is not adopted (the patch it stamps is still applied
// in its place), and Observe reports false.
func (c *Clock) Observe(r HLC) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r.Wall > c.now().Add(MaxSkew).UnixMilli() {
		return false
	}
	if r.Compare(c.last) > 0 {
		c.last = r
	}
	return true
}

// CheckStamp checks that at, an HLC carried by a message signed at
// envelope time sent (RFC 3339 seconds), lies within MaxSkew of it, one
// second more for the envelope time's resolution. It depends only on the
// message, so every member decides alike.
func CheckStamp(at HLC, sent time.Time) error {
	d := time.Duration(at.Wall-sent.UnixMilli()) * time.Millisecond
	if d < -(MaxSkew+time.Second) || d > MaxSkew+time.Second {
		return fmt.Errorf("%w: clock %s is %v from the message time %s (at most %v)", ErrInvalid, at, d, sent.UTC().Format(time.RFC3339), MaxSkew)
	}
	return nil
}
