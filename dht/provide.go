package dht

import (
	"context"
	"slices"
	"time"

	"github.com/ipfs/go-cid"
)

const (
	// retryAfter is the first delay before providing again after a
	// failure (typically an empty routing table while the mesh is
	// joining); it doubles up to the re-provide interval.
	retryAfter = 500 * time.Millisecond
	// growthCheck is how often the routing table's size is compared with
	// its size at the last provide.
	growthCheck = time.Second
	// provideBound bounds one provide of one key. A lookup through a mesh
	// that is still joining can wait on dials that time out one after the
	// other; past the bound kad-dht stores the record at the closest peers
	// found so far, and the next round, not a provide stuck for hours,
	// places it better.
	provideBound = time.Minute
)

// provideLoop provides the advertised keys: at once when Advertise changes
// them, every re-provide interval, after a failure with a backoff, and
// whenever the routing table has doubled since the last round.
//
// The doubling is what places a record where lookups look. A provide
// stores the record at the peers closest to the key that its lookup finds;
// an agent that provides while it, or the mesh, is joining knows a few
// peers and finds few, so the record lands on peers that are not the
// closest once the mesh has formed. Later lookups end at the closest
// peers and never ask those that hold it, and without a new provide that
// lasts until the re-provide interval (hours). Providing again each time
// the routing table doubles costs log2 of its size in rounds over an
// agent's life, nearly all of them while it joins.
func (d *Directory) provideLoop() {
	defer close(d.done)
	timer := time.NewTimer(d.every)
	defer timer.Stop()
	growth := time.NewTicker(growthCheck)
	defer growth.Stop()
	retry := retryAfter
	placedAt := 0 // routing table size when the last round started
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-d.kick:
			retry = retryAfter
		case <-timer.C:
		case <-growth.C:
			size := d.kad.RoutingTable().Size()
			if size == 0 || size < 2*placedAt || len(d.provided()) == 0 {
				continue
			}
			d.log.Debug("dht: routing table doubled, providing again", "size", size, "last", placedAt)
		}
		placedAt = d.kad.RoutingTable().Size()
		failed := false
		for _, k := range d.provided() {
			err := d.provideBounded(d.ctx, k)
			if d.ctx.Err() != nil {
				return
			}
			if err != nil {
				failed = true
				d.log.Debug("dht: provide failed", "key", k, "err", err)
			}
		}
		next := d.every
		if failed {
			next = min(retry, d.every)
			retry *= 2
		} else {
			retry = retryAfter
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// provided returns the keys provideLoop provides: the advertised
// capabilities' and the topics' being advertised.
func (d *Directory) provided() []cid.Cid {
	d.mu.Lock()
	defer d.mu.Unlock()
	keys := make([]cid.Cid, 0, len(d.keys)+len(d.topics))
	keys = append(keys, d.keys...)
	for _, k := range d.topics {
		if !slices.ContainsFunc(keys, k.Equals) {
			keys = append(keys, k)
		}
	}
	return keys
}

// holdTopic adds k to the provided keys while ctx, a topic advertiser's,
// lives; the advertiser calls again with the same ctx every interval.
func (d *Directory) holdTopic(ctx context.Context, k cid.Cid) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.topics[ctx]; ok {
		return
	}
	d.topics[ctx] = k
	context.AfterFunc(ctx, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(d.topics, ctx)
	})
}

// provideBounded provides k within provideBound (and the re-provide
// interval, when shorter).
func (d *Directory) provideBounded(ctx context.Context, k cid.Cid) error {
	ctx, cancel := context.WithTimeout(ctx, min(provideBound, d.every))
	defer cancel()
	return d.provide(ctx, k)
}
