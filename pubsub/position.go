package pubsub

import (
	"encoding/json"
	"slices"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
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
