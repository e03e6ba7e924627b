package node

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// peerState is what a node learned of another agent from its hello.
type peerState struct {
	name         string
	capabilities []protocol.Capability
	features     []string
	lastHello    time.Time
	seq          int64 // Hello.Seq of the last hello applied
}

// Peers returns the agents this node knows, sorted by agent id: those it
// has exchanged hello with, those whose heartbeats it hears (through the
// mesh, not only direct peers) and connected peers that have done neither
// yet. An agent whose heartbeats are overdue is shown with status stale,
// and left out once they are long overdue (see Presence) unless it is
// connected.
func (n *Node) Peers() []protocol.PeerInfo {
	now := n.cfg.Now()
	n.mu.RLock()
	known := make(map[peer.ID]protocol.PeerInfo, len(n.peers)+len(n.presence))
	for id, ps := range n.peers {
		known[id] = protocol.PeerInfo{
			AgentID:      id.String(),
			Name:         ps.name,
			Capabilities: slices.Clone(ps.capabilities),
			Features:     slices.Clone(ps.features),
			LastHello:    ps.lastHello,
		}
	}
	gone := make(map[peer.ID]bool)
	for id, p := range n.presence {
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
		known[id] = pi
	}
	n.mu.RUnlock()
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

// Capabilities returns the capability objects this node offers, sorted by
// name.
func (n *Node) Capabilities() []protocol.Capability {
	n.mu.RLock()
	defer n.mu.RUnlock()
	out := make([]protocol.Capability, 0, len(n.services))
	for _, s := range n.services {
		out = append(out, s.Capability)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (n *Node) capabilityNames() []string {
	n.mu.RLock()
	defer n.mu.RUnlock()
	return slices.Clone(n.capNames)
}

// SetServices replaces the capabilities this node offers and announces the
// change to every connected agent with a fresh hello.
func (n *Node) SetServices(ss []Service) error {
	if err := validateServices(ss); err != nil {
		return err
	}
	if err := n.setServices(ss); err != nil {
		return err
	}
	n.log.Info("capabilities changed", "capabilities", n.capabilityNames())
	if n.dir != nil {
		n.dir.Advertise(n.Capabilities())
	}
	if n.topics != nil {
		n.topics.SetSelf(n.topicSelf())
		n.kickPresence()
	}
	for _, p := range n.host.Network().Peers() {
		// A peer speaks hello if identify says so or if it has sent us one
		// (our own identify of it may not have finished yet).
		n.mu.RLock()
		_, known := n.peers[p]
		n.mu.RUnlock()
		if ok, _ := n.host.Peerstore().SupportsProtocols(p, protocol.HelloProtocol); len(ok) == 0 && !known {
			continue
		}
		n.goTracked(func() { n.sayHello(p) })
	}
	return nil
}

func (n *Node) setServices(ss []Service) error {
	m := make(map[string]*service, len(ss))
	for _, s := range ss {
		cs, err := compileService(s)
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		m[s.Capability.Name] = cs
	}
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	n.mu.Lock()
	n.services = m
	n.capNames = names
	// Strictly increasing even if the clock stands still or steps back.
	n.servicesSeq = max(time.Now().UnixNano(), n.servicesSeq+1)
	n.mu.Unlock()
	return nil
}
