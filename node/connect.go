package node

import (
	"context"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Connect dials a peer and waits for the connection.
func (n *Node) Connect(ctx context.Context, ai peer.AddrInfo) error {
	if err := n.host.Connect(ctx, ai); err != nil {
		return fmt.Errorf("node: connect %s: %w", ai.ID, err)
	}
	return nil
}

// bootstrapEnough is how many connected peers other than its bootstrap
// peers a node needs before it stops holding on to the bootstrap peers:
// kad-dht's own rule, which dials its bootstrap peers again when its
// routing table holds fewer than 10 peers.
const bootstrapEnough = 10

// bootstrapLoop keeps the node connected to its bootstrap peers while it
// has fewer than bootstrapEnough other peers: it dials each until
// connected and redials after a disconnect, clearing libp2p's dial
// backoff so that a peer that comes back is reached promptly, and the
// connection manager may not trim them (tagBootstrap). Once the node has
// bootstrapEnough other peers the bootstrap peers are peers like any
// other: unprotected and not redialled, so a node does not keep
// connections it no longer needs (each costs the memory of a transport
// connection and its streams' goroutines) and the bootstrap peers of a
// large mesh are not held by every agent that joined through them. Below
// bootstrapEnough again, they are protected and redialled again.
func (n *Node) bootstrapLoop(infos []peer.AddrInfo) {
	const minWait, maxWait = 250 * time.Millisecond, 10 * time.Second
	wait := minWait
	boot := make(map[peer.ID]bool, len(infos))
	for _, ai := range infos {
		boot[ai.ID] = true
	}
	held := false // the first pass protects them, unless the node has enough others already
	for {
		allConnected := true
		if enough := n.othersConnected(boot) >= bootstrapEnough; enough != !held {
			held = !enough
			for _, ai := range infos {
				if held {
					n.host.ConnManager().Protect(ai.ID, tagBootstrap)
				} else {
					n.host.ConnManager().Unprotect(ai.ID, tagBootstrap)
				}
			}
		}
		for _, ai := range infos {
			if !held || ai.ID == n.id || n.host.Network().Connectedness(ai.ID) == network.Connected {
				continue
			}
			allConnected = false
			clearBackoff(n.host, ai.ID)
			ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
			err := n.host.Connect(ctx, ai)
			cancel()
			if err != nil && n.ctx.Err() == nil {
				n.log.Debug("bootstrap dial failed", "remote_peer", ai.ID, "err", err)
			} else if err == nil {
				n.log.Info("connected to bootstrap peer", "remote_peer", ai.ID)
			}
		}
		if allConnected {
			wait = maxWait
		} else {
			wait = min(wait*2, maxWait)
		}
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// othersConnected returns how many peers the node is connected to that
// are not in boot.
func (n *Node) othersConnected(boot map[peer.ID]bool) int {
	k := 0
	for _, p := range n.host.Network().Peers() {
		if !boot[p] {
			k++
		}
	}
	return k
}

type mdnsNotifee struct{ n *Node }

// HandlePeerFound connects to agents found on the local network.
func (m mdnsNotifee) HandlePeerFound(ai peer.AddrInfo) {
	n := m.n
	if ai.ID == n.id || n.host.Network().Connectedness(ai.ID) == network.Connected {
		return
	}
	n.goTracked(func() {
		ctx, cancel := context.WithTimeout(n.ctx, 10*time.Second)
		defer cancel()
		if err := n.host.Connect(ctx, ai); err != nil {
			n.log.Debug("mDNS peer unreachable", "remote_peer", ai.ID, "err", err)
		}
	})
}
