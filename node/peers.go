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

// Peers returns every agent this node has exchanged hello with, plus
// connected peers that have not (yet), sorted by agent id.
func (n *Node) Peers() []protocol.PeerInfo {
	n.mu.RLock()
	known := make(map[peer.ID]protocol.PeerInfo, len(n.peers))
	for id, ps := range n.peers {
		known[id] = protocol.PeerInfo{
			AgentID:      id.String(),
			Name:         ps.name,
			Capabilities: slices.Clone(ps.capabilities),
			Features:     slices.Clone(ps.features),
			LastHello:    ps.lastHello,
		}
	}
	n.mu.RUnlock()
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
		for _, a := range n.host.Peerstore().Addrs(id) {
			pi.Addrs = append(pi.Addrs, a.String())
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
		// Normalise the ACL to peer IDs: a file may list either form of an
		// agent id.
		cs.allowed = make(map[peer.ID]bool, len(s.Capability.AuthorizedRequesterIDs))
		for _, a := range s.Capability.AuthorizedRequesterIDs {
			id, err := sign.ParseAgentID(a)
			if err != nil {
				return fmt.Errorf("node: capability %q: authorized_requester_ids: %w", s.Capability.Name, err)
			}
			cs.allowed[id] = true
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
