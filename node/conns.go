package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// ConnLimits bounds a node's libp2p connections, so that idle connections
// cannot lock new peers out.
//
// The resource manager refuses connections beyond MaxInbound / MaxConns
// (the new peer sees its connection closed during the handshake). The
// connection manager closes the least useful connections when there are
// more than HighWater, down to LowWater. HighWater must be below
// MaxInbound: were it above, the resource manager would refuse new peers
// before the connection manager ever trimmed (the lockout of issue 12:
// 128 inbound admitted, high water 192). When inbound connections reach
// HighWater the node trims at once, ignoring the grace period for
// connections with no open stream and no protection, so the gap between
// HighWater and MaxInbound is always free for newcomers. Peers doing
// useful work are protected and never trimmed: peers with a call in
// flight either way, static relays, GossipSub mesh peers of every topic
// but presence (protected by go-libp2p-pubsub), and bootstrap peers
// while the node has fewer than 10 other peers (see bootstrapLoop).
type ConnLimits struct {
	// MaxInbound is the resource manager's limit on inbound connections.
	// Default 256.
	MaxInbound int
	// MaxConns is its limit on all connections. Default 512.
	MaxConns int
	// HighWater is the connection count above which the connection
	// manager trims, and the inbound count at which the node trims at
	// once. Default 192.
	HighWater int
	// LowWater is what trimming brings the count down to. Default 96.
	LowWater int
	// GracePeriod protects a new connection from the connection manager's
	// regular trim (not from the trim at HighWater inbound, which spares
	// connections with open streams). Default 10 s.
	GracePeriod time.Duration
	// TrimInterval is how often the connection manager checks the count
	// against HighWater (its silence period). Default 1 s.
	TrimInterval time.Duration
}

// DefaultConnLimits returns the connection limits a node uses unless told
// otherwise.
func DefaultConnLimits() ConnLimits {
	return ConnLimits{
		MaxInbound:   256,
		MaxConns:     512,
		HighWater:    192,
		LowWater:     96,
		GracePeriod:  10 * time.Second,
		TrimInterval: time.Second,
	}
}

func (l ConnLimits) validate() error {
	switch {
	case l.LowWater < 1 || l.HighWater <= l.LowWater:
		return errors.New("connection limits: need 0 < LowWater < HighWater")
	case l.HighWater >= l.MaxInbound:
		return fmt.Errorf("connection limits: HighWater %d must be below MaxInbound %d, or new peers are refused before any trim", l.HighWater, l.MaxInbound)
	case l.MaxConns < l.MaxInbound:
		return errors.New("connection limits: MaxConns must be at least MaxInbound")
	case l.GracePeriod < 0 || l.TrimInterval <= 0:
		return errors.New("connection limits: GracePeriod must not be negative and TrimInterval must be positive")
	}
	return nil
}

// WithConnLimits sets the libp2p connection limits (see ConnLimits).
func WithConnLimits(l ConnLimits) Option {
	return func(c *Config) error { c.Conns = l; return nil }
}

// Connection manager tags. tagBusy protects a peer while a call to or
// from it is in flight.
const (
	tagBusy      = "meshagent-call"
	tagBootstrap = "meshagent-bootstrap"
	tagRelay     = "meshagent-relay"
)

// guard is the node's part of connection management: it protects peers
// doing useful work and trims idle inbound connections the moment they
// reach HighWater.
type guard struct {
	host   host.Host
	limits ConnLimits
	log    *slog.Logger
	kick   chan struct{}

	mu   sync.Mutex
	busy map[peer.ID]int // calls in flight per peer
}

func newGuard(h host.Host, limits ConnLimits, log *slog.Logger) *guard {
	return &guard{host: h, limits: limits, log: log, kick: make(chan struct{}, 1), busy: map[peer.ID]int{}}
}

// hold protects p while a call is in flight, until release. (A pair of
// methods rather than a returned func, which cost an allocation a call.)
func (g *guard) hold(p peer.ID) {
	g.mu.Lock()
	g.busy[p]++
	if g.busy[p] == 1 {
		g.host.ConnManager().Protect(p, tagBusy)
	}
	g.mu.Unlock()
}

// release ends a hold of p.
func (g *guard) release(p peer.ID) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.busy[p]--; g.busy[p] == 0 {
		delete(g.busy, p)
		g.host.ConnManager().Unprotect(p, tagBusy)
	}
}

// protectAddrs protects the peers named by /p2p/ addresses with tag.
func (g *guard) protectAddrs(tag string, addrs []ma.Multiaddr) {
	for _, a := range addrs {
		if ai, err := peer.AddrInfoFromP2pAddr(a); err == nil {
			g.host.ConnManager().Protect(ai.ID, tag)
		}
	}
}

// watch makes every new inbound connection wake run.
func (g *guard) watch() {
	g.host.Network().Notify(&network.NotifyBundle{ConnectedF: func(_ network.Network, c network.Conn) {
		if c.Stat().Direction == network.DirInbound {
			select {
			case g.kick <- struct{}{}:
			default:
			}
		}
	}})
}

// run trims whenever a new inbound connection arrives, until ctx is done.
func (g *guard) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.kick:
		}
		g.trim(ctx)
	}
}

// inbound returns the node's inbound connections.
func (g *guard) inbound() []network.Conn {
	var out []network.Conn
	for _, c := range g.host.Network().Conns() {
		if c.Stat().Direction == network.DirInbound {
			out = append(out, c)
		}
	}
	return out
}

// trim brings inbound connections from HighWater down to LowWater: first
// the connection manager's regular trim, then, if connections still in
// their grace period keep the count up, the unprotected inbound
// connections with the fewest open streams, the lowest tag value and the
// oldest first (an honest newcomer opens a stream at once; an idle
// connection never does).
func (g *guard) trim(ctx context.Context) {
	lim := g.limits
	if len(g.inbound()) < lim.HighWater {
		return
	}
	cm := g.host.ConnManager()
	cm.TrimOpenConns(ctx)
	conns := g.inbound()
	excess := len(conns) - lim.LowWater
	if len(conns) < lim.HighWater || excess <= 0 {
		return
	}
	type cand struct {
		c       network.Conn
		streams int
		value   int
		opened  time.Time
	}
	var cands []cand
	for _, c := range conns {
		p := c.RemotePeer()
		if cm.IsProtected(p, "") {
			continue
		}
		v := 0
		if ti := cm.GetTagInfo(p); ti != nil {
			v = ti.Value
		}
		cands = append(cands, cand{c: c, streams: len(c.GetStreams()), value: v, opened: c.Stat().Opened})
	}
	slices.SortFunc(cands, func(a, b cand) int {
		switch {
		case a.streams != b.streams:
			return a.streams - b.streams
		case a.value != b.value:
			return a.value - b.value
		}
		return a.opened.Compare(b.opened)
	})
	closed := 0
	for _, c := range cands[:min(excess, len(cands))] {
		_ = c.c.CloseWithError(network.ConnGarbageCollected)
		closed++
	}
	g.log.Info("inbound connections trimmed", "inbound", len(conns), "closed", closed, "high_water", lim.HighWater, "low_water", lim.LowWater)
}
