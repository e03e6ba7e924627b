package node

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// maxKnownPeers bounds the directory of agents learnt from hello, and the
// heartbeats kept.
const maxKnownPeers = 4096

// peerState is what a node learned of another agent from its hello.
type peerState struct {
	name         string
	capabilities []protocol.Capability
	features     []string
	lastHello    time.Time
	seq          int64 // Hello.Seq of the last hello applied
}

// peerTable is what the node learned from other agents' hellos, under its
// own lock. Entries are replaced, never modified, so a *peerState read
// from it may be used after the lock is released.
type peerTable struct {
	// connected reports whether the node holds a connection to p; the
	// disconnected are forgotten first when the table is full.
	connected func(p peer.ID) bool

	mu sync.RWMutex
	m  map[peer.ID]*peerState
	// signal is closed (and replaced) whenever a hello is applied, waking
	// wait.
	signal chan struct{}
}

func newPeerTable(connected func(peer.ID) bool) *peerTable {
	return &peerTable{connected: connected, m: map[peer.ID]*peerState{}, signal: make(chan struct{})}
}

// apply records p's hello unless it is older than the one held (applied
// false). changed reports a new peer, or a new name or capabilities.
func (pt *peerTable) apply(p peer.ID, ps *peerState) (applied, changed bool, had int64) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	old, seen := pt.m[p]
	if seen && ps.seq < old.seq {
		return false, false, old.seq
	}
	if !seen && len(pt.m) >= maxKnownPeers {
		pt.forgetOldestDisconnectedLocked()
	}
	changed = !seen || old.name != ps.name || !sameCapabilities(old.capabilities, ps.capabilities)
	pt.m[p] = ps
	close(pt.signal)
	pt.signal = make(chan struct{})
	return true, changed, 0
}

// forgetOldestDisconnectedLocked drops the disconnected peer whose hello is
// oldest, to make room. pt.mu must be held.
func (pt *peerTable) forgetOldestDisconnectedLocked() {
	var oldest peer.ID
	var at time.Time
	for id, ps := range pt.m {
		if pt.connected(id) {
			continue
		}
		if oldest == "" || ps.lastHello.Before(at) {
			oldest, at = id, ps.lastHello
		}
	}
	if oldest != "" {
		delete(pt.m, oldest)
	}
}

// get returns p's last hello.
func (pt *peerTable) get(p peer.ID) (*peerState, bool) {
	pt.mu.RLock()
	defer pt.mu.RUnlock()
	ps, ok := pt.m[p]
	return ps, ok
}

// offering returns the connected agents whose hello offers the
// capability named name, with the capability object each signed.
func (pt *peerTable) offering(name string) map[peer.ID]protocol.Capability {
	pt.mu.RLock()
	defer pt.mu.RUnlock()
	out := map[peer.ID]protocol.Capability{}
	for id, ps := range pt.m {
		for _, c := range ps.capabilities {
			if c.Name == name && pt.connected(id) {
				out[id] = c
				break
			}
		}
	}
	return out
}

// forget drops p's hello unless p is connected.
func (pt *peerTable) forgetDisconnected(p peer.ID) {
	pt.mu.Lock()
	defer pt.mu.Unlock()
	if !pt.connected(p) {
		delete(pt.m, p)
	}
}

// wait returns p's hello, waiting for one until ctx or closed is done.
func (pt *peerTable) wait(ctx context.Context, closed <-chan struct{}, p peer.ID) (*peerState, error) {
	for {
		pt.mu.RLock()
		ps, ok := pt.m[p]
		changed := pt.signal
		pt.mu.RUnlock()
		if ok {
			return ps, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-closed:
			return nil, ErrClosed
		}
	}
}

// infos returns what the hellos say, as PeerInfo by agent.
func (pt *peerTable) infos() map[peer.ID]protocol.PeerInfo {
	pt.mu.RLock()
	defer pt.mu.RUnlock()
	out := make(map[peer.ID]protocol.PeerInfo, len(pt.m))
	for id, ps := range pt.m {
		out[id] = protocol.PeerInfo{
			AgentID:      id.String(),
			Name:         ps.name,
			Capabilities: slices.Clone(ps.capabilities),
			Features:     slices.Clone(ps.features),
			LastHello:    ps.lastHello,
		}
	}
	return out
}

// PeerCapabilities returns the capability objects p announced in its last
// hello, and whether a hello has been received from it.
func (n *Node) PeerCapabilities(p peer.ID) ([]protocol.Capability, bool) {
	ps, ok := n.peers.get(p)
	if !ok {
		return nil, false
	}
	return slices.Clone(ps.capabilities), true
}

// WaitHello waits until a signed hello from p has been received and returns
// the capability objects it announced. It returns at once if one already
// has; otherwise it returns ctx's error, or ErrClosed if the node closes.
func (n *Node) WaitHello(ctx context.Context, p peer.ID) ([]protocol.Capability, error) {
	ps, err := n.peers.wait(ctx, n.ctx.Done(), p)
	if err != nil {
		return nil, err
	}
	return slices.Clone(ps.capabilities), nil
}

// Peers returns the agents this node knows, sorted by agent id: those it
// has exchanged hello with, those whose heartbeats it hears (through the
// mesh, not only direct peers) and connected peers that have done neither
// yet. An agent whose heartbeats are overdue is shown with status stale,
// and left out once they are long overdue (see Presence) unless it is
// connected.
func (n *Node) Peers() []protocol.PeerInfo {
	now := n.cfg.Now()
	known := n.peers.infos()
	gone := make(map[peer.ID]bool)
	for id, p := range n.presence.snapshot() {
		status, listed := p.staleness(now)
		if !listed {
			// Listed below only if still connected, and then as stale.
			gone[id] = true
			if pi, ok := known[id]; ok {
				pi.Status, pi.LastHeartbeat = protocol.StatusStale, p.at
				known[id] = pi
			}
			continue
		}
		pi, ok := known[id]
		if !ok {
			// Heard of only through the mesh: the heartbeat, signed by
			// the agent, names its capabilities and addresses.
			pi = protocol.PeerInfo{AgentID: id.String(), Name: p.hb.Name}
			for _, c := range p.hb.Capabilities {
				pi.Capabilities = append(pi.Capabilities, protocol.Capability{Name: c})
			}
			pi.Addrs = slices.Clone(p.hb.Addrs)
		}
		pi.Status, pi.LastHeartbeat, pi.Load, pi.PersonaType = status, p.at, p.hb.Load, p.hb.PersonaType
		pi.CurrentBead, pi.MaxConcurrentBeads = p.hb.CurrentBead, p.hb.MaxConcurrentBeads
		known[id] = pi
	}
	for id := range gone {
		if n.host.Network().Connectedness(id) != network.Connected {
			delete(known, id)
		}
	}
	if n.host == nil {
		return nil
	}
	for _, id := range n.host.Network().Peers() {
		if _, ok := known[id]; !ok {
			known[id] = protocol.PeerInfo{AgentID: id.String()}
		}
	}
	out := make([]protocol.PeerInfo, 0, len(known))
	for id, pi := range known {
		pi.PublicKey, _ = sign.PublicKeyBase64(id)
		pi.Connected = n.host.Network().Connectedness(id) == network.Connected
		if addrs := n.host.Peerstore().Addrs(id); len(addrs) > 0 {
			pi.Addrs = pi.Addrs[:0]
			for _, a := range addrs {
				pi.Addrs = append(pi.Addrs, a.String())
			}
		}
		sort.Strings(pi.Addrs)
		if pi.Capabilities == nil {
			pi.Capabilities = []protocol.Capability{}
		}
		if pi.Addrs == nil {
			pi.Addrs = []string{}
		}
		if l := n.host.Peerstore().LatencyEWMA(id); l > 0 {
			pi.LatencyMS = float64(l.Microseconds()) / 1000
		}
		out = append(out, pi)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AgentID < out[j].AgentID })
	return out
}
