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

// bootstrapLoop keeps the node connected to its bootstrap peers: it dials
// each until connected and redials after a disconnect, clearing libp2p's
// dial backoff so that a peer that comes back is reached promptly.
func (n *Node) bootstrapLoop(infos []peer.AddrInfo) {
	const minWait, maxWait = 250 * time.Millisecond, 10 * time.Second
	wait := minWait
	for {
		allConnected := true
		for _, ai := range infos {
			if ai.ID == n.id || n.host.Network().Connectedness(ai.ID) == network.Connected {
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
