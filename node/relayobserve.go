package node

import (
	"context"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/circuitv2/client"
	ma "github.com/multiformats/go-multiaddr"
)

// observeTimeout bounds the dial to each static relay.
const observeTimeout = 10 * time.Second

// observeThroughRelays makes each static relay's connection leave from a
// listening UDP port. AutoRelay dials the relays while the host is being
// built, before its listeners exist, so that QUIC connection leaves from a
// throwaway port: the address the relay then observes (identify) is a NAT
// mapping nobody can punch to, and hole punching finds no public address.
// Such a connection is closed and dialled again, from the listening
// socket, and the reservation made again at once: AutoRelay would renew
// it only after its backoff, and peers dialling the circuit meanwhile
// would be refused.
func (n *Node) observeThroughRelays(relays []peer.AddrInfo) {
	for _, r := range relays {
		for attempt := range 2 {
			ctx, cancel := context.WithTimeout(n.ctx, observeTimeout)
			err := n.host.Connect(ctx, r)
			if err == nil && attempt > 0 {
				_, err = client.Reserve(ctx, n.host, r)
			}
			cancel()
			if err != nil {
				if n.ctx.Err() == nil {
					n.log.Debug("static relay from the listening socket", "relay", r.ID, "err", err)
				}
				break
			}
			stray := n.straysTo(r.ID)
			if len(stray) == 0 {
				break
			}
			for _, c := range stray {
				_ = c.Close()
			}
		}
	}
}

// straysTo returns the QUIC connections to p whose local port is not one
// the host listens on.
func (n *Node) straysTo(p peer.ID) []network.Conn {
	listening := map[string]bool{}
	for _, a := range n.host.Network().ListenAddresses() {
		if port, err := a.ValueForProtocol(ma.P_UDP); err == nil {
			listening[port] = true
		}
	}
	var out []network.Conn
	for _, c := range n.host.Network().ConnsToPeer(p) {
		local := c.LocalMultiaddr()
		if _, err := local.ValueForProtocol(ma.P_QUIC_V1); err != nil {
			continue
		}
		if port, err := local.ValueForProtocol(ma.P_UDP); err == nil && !listening[port] {
			out = append(out, c)
		}
	}
	return out
}
