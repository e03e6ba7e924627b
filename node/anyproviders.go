package node

import (
	"context"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
)

const (
	// anyDownFor is how long a provider that could not be reached is
	// tried after the others.
	anyDownFor = 30 * time.Second
	// anyLookupEvery is how long a directory lookup for a capability is
	// reused; a call that finds it older starts another in the
	// background and uses what the last one found meanwhile.
	anyLookupEvery = 30 * time.Second
	// anyLookupEmptyEvery replaces anyLookupEvery when the last lookup
	// found nobody, so that a provider that just started is found soon.
	anyLookupEmptyEvery = 5 * time.Second
	// anyLookupTimeout bounds one directory lookup.
	anyLookupTimeout = 10 * time.Second
	// maxAnyLookups bounds the capabilities whose lookups are kept.
	maxAnyLookups = 1024
)

// anyProviders is what CallAny remembers between calls, under its own
// lock: its calls in flight per provider, the providers it could not
// reach, and the directory's answers per capability.
type anyProviders struct {
	now func() time.Time

	mu       sync.Mutex
	inFlight map[peer.ID]int
	down     map[peer.ID]time.Time
	lookups  map[string]*dirLookup
}

// dirLookup is the directory's answer for one capability.
type dirLookup struct {
	started time.Time
	running bool
	// found: the providers confirmed by the last lookup and the one
	// running, with the capability object each signed.
	found map[peer.ID]protocol.Capability
	seen  map[peer.ID]bool // found by the running lookup
	// first is closed once the running lookup found a provider or ended.
	first chan struct{}
}

func newAnyProviders(now func() time.Time) *anyProviders {
	return &anyProviders{now: now, inFlight: map[peer.ID]int{}, down: map[peer.ID]time.Time{}, lookups: map[string]*dirLookup{}}
}

// begin counts a call to p in flight. The returned func ends it, and
// records whether p was reached.
func (ap *anyProviders) begin(p peer.ID) func(reached bool) {
	ap.mu.Lock()
	ap.inFlight[p]++
	ap.mu.Unlock()
	return func(reached bool) {
		ap.mu.Lock()
		defer ap.mu.Unlock()
		if ap.inFlight[p]--; ap.inFlight[p] <= 0 {
			delete(ap.inFlight, p)
		}
		if reached {
			delete(ap.down, p)
			return
		}
		if len(ap.down) >= maxKnownPeers {
			clear(ap.down)
		}
		ap.down[p] = ap.now()
	}
}

// state returns this node's calls in flight to p and whether p was
// unreachable lately.
func (ap *anyProviders) state(p peer.ID, now time.Time) (inFlight int, down bool) {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	at, ok := ap.down[p]
	if ok && now.Sub(at) > anyDownFor {
		delete(ap.down, p)
		ok = false
	}
	return ap.inFlight[p], ok
}

// lookup returns the providers the directory found for capability, a
// channel closed once the running lookup found one, and whether the
// caller must start a lookup (none yet, or the last is old).
func (ap *anyProviders) lookup(capability string, now time.Time) (found map[peer.ID]protocol.Capability, first <-chan struct{}, start *dirLookup) {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	lk := ap.lookups[capability]
	if lk == nil {
		if len(ap.lookups) >= maxAnyLookups {
			ap.forgetOldestLocked()
		}
		lk = &dirLookup{found: map[peer.ID]protocol.Capability{}}
		ap.lookups[capability] = lk
	}
	every := anyLookupEvery
	if len(lk.found) == 0 {
		every = anyLookupEmptyEvery
	}
	if !lk.running && (lk.started.IsZero() || now.Sub(lk.started) > every) {
		lk.running, lk.started = true, now
		lk.seen, lk.first = map[peer.ID]bool{}, make(chan struct{})
		start = lk
	}
	found = make(map[peer.ID]protocol.Capability, len(lk.found))
	for id, c := range lk.found {
		found[id] = c
	}
	first = lk.first
	if first == nil {
		first = closedChan
	}
	return found, first, start
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

func (ap *anyProviders) forgetOldestLocked() {
	var oldest string
	var at time.Time
	for name, lk := range ap.lookups {
		if !lk.running && (oldest == "" || lk.started.Before(at)) {
			oldest, at = name, lk.started
		}
	}
	delete(ap.lookups, oldest)
}

// found records a provider the running lookup confirmed.
func (ap *anyProviders) found(lk *dirLookup, p peer.ID, c protocol.Capability) {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	lk.found[p], lk.seen[p] = c, true
	select {
	case <-lk.first:
	default:
		close(lk.first)
	}
}

// finish ends the running lookup: providers it did not find again are
// forgotten.
func (ap *anyProviders) finish(lk *dirLookup) {
	ap.mu.Lock()
	defer ap.mu.Unlock()
	for id := range lk.found {
		if !lk.seen[id] {
			delete(lk.found, id)
		}
	}
	lk.running, lk.seen = false, nil
	select {
	case <-lk.first:
	default:
		close(lk.first)
	}
}

// runLookup asks the directory for the providers of capability, each
// confirmed by its signed hello.
func (n *Node) runLookup(capability string, lk *dirLookup) {
	defer n.anyState.finish(lk)
	ctx, cancel := context.WithTimeout(n.ctx, anyLookupTimeout)
	defer cancel()
	for r := range n.dir.Find(ctx, capability, false, n.confirmByHello) {
		for _, c := range r.Capabilities {
			if c.Name == capability {
				n.anyState.found(lk, r.Peer.ID, c)
			}
		}
	}
}

// anyCandidates returns the providers of capability CallAny may try for
// from: connected agents whose hello offers it, and those the directory
// confirmed. With none known yet, it waits for the directory's first.
func (n *Node) anyCandidates(ctx context.Context, capability string, from requester) ([]candidate, error) {
	offers := n.peers.offering(capability)
	if n.dir != nil {
		found, first, start := n.anyState.lookup(capability, n.cfg.Now())
		if start != nil && !n.goTracked(func() { n.runLookup(capability, start) }) {
			n.anyState.finish(start)
			return nil, ErrClosed
		}
		if len(offers) == 0 && len(found) == 0 {
			select {
			case <-first:
			case <-ctx.Done():
				return nil, protocol.Errorf(protocol.CodeTimeout, "timed out looking for a provider of %s", capability)
			case <-n.ctx.Done():
				return nil, ErrClosed
			}
			offers = n.peers.offering(capability)
			found, _, _ = n.anyState.lookup(capability, n.cfg.Now())
		}
		for id, c := range found {
			if _, ok := offers[id]; !ok {
				offers[id] = c // the hello, when held, is the fresher
			}
		}
	}
	now := n.cfg.Now()
	out := make([]candidate, 0, len(offers))
	for id, c := range offers {
		if id == n.id {
			continue
		}
		if a, err := compileACL(c.AuthorizedRequesterIDs); err == nil && !a.admits(from) {
			continue // it would refuse us: UNAUTHORIZED is final
		}
		cd := candidate{id: id, cap: c, latency: n.host.Peerstore().LatencyEWMA(id)}
		inFlight, down := n.anyState.state(id, now)
		cd.down = down
		capacity := DefaultLimits().MaxConcurrent
		if ps, ok := n.presence.get(id); ok {
			if status, listed := ps.staleness(now); listed && status != protocol.StatusStale {
				cd.busy = status == protocol.StatusBusy
				cd.load = ps.hb.Load
				if ps.hb.MaxConcurrent > 0 {
					capacity = ps.hb.MaxConcurrent
				}
			}
		}
		cd.load = max(cd.load, float64(inFlight)/float64(capacity))
		out = append(out, cd)
	}
	return out, nil
}
