package node

import (
	"context"
	"errors"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
)

// Discover finds agents that offer a capability (or, with byKeyword, a
// capability with that keyword) through the DHT, and streams each as soon
// as its signed hello confirms it: provider records are unsigned hints, so
// an agent is listed only with the capability objects it signed. Each
// PeerInfo carries only the matching capabilities. The channel closes when
// the search ends or ctx is done.
func (n *Node) Discover(ctx context.Context, query string, byKeyword bool) (<-chan protocol.PeerInfo, error) {
	if n.dir == nil {
		return nil, ErrNoDirectory
	}
	if query == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "a capability or keyword to discover is required")
	}
	// The search ends with the caller's ctx or with the node.
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(n.ctx, cancel)
	results := n.dir.Find(ctx, query, byKeyword, n.confirmByHello)
	out := make(chan protocol.PeerInfo)
	if !n.goTracked(func() {
		defer close(out)
		defer stop()
		defer cancel()
		for r := range results {
			pi := protocol.PeerInfo{AgentID: r.Peer.ID.String(), Capabilities: r.Capabilities, Addrs: []string{}}
			for _, a := range r.Peer.Addrs {
				pi.Addrs = append(pi.Addrs, a.String())
			}
			if ps, ok := n.peers.get(r.Peer.ID); ok {
				pi.Name, pi.Features, pi.LastHello = ps.name, ps.features, ps.lastHello
			}
			select {
			case out <- pi:
			case <-ctx.Done():
				for range results { // let the directory finish and close
				}
				return
			}
		}
	}) {
		stop()
		cancel()
		return nil, ErrClosed
	}
	return out, nil
}

// helloFreshness is how recent a hello must be for discovery to trust it
// without asking again.
const helloFreshness = time.Minute

// confirmByHello returns the capabilities p signed in a hello, exchanging
// a fresh one if the last is missing or old. A cached hello is trusted only
// while p is connected: a provider that has gone away since its last hello
// (its DHT records outlive it) must answer a dial before it is listed, so
// discovery does not hand callers an agent they cannot reach.
func (n *Node) confirmByHello(ctx context.Context, ai peer.AddrInfo) ([]protocol.Capability, error) {
	ps, ok := n.peers.get(ai.ID)
	connected := n.host.Network().Connectedness(ai.ID) == network.Connected
	if ok && connected && n.cfg.Now().Sub(ps.lastHello) < helloFreshness {
		return ps.capabilities, nil
	}
	if err := n.host.Connect(ctx, ai); err != nil {
		return nil, err
	}
	n.sayHello(ai.ID)
	caps, ok := n.PeerCapabilities(ai.ID)
	if !ok {
		return nil, errors.New("node: no signed hello from provider")
	}
	return caps, nil
}
