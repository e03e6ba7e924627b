package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/metrics"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/store"
)

// readyChecks are what /readyz asks of a running node: its host listens,
// its store answers, and, when bootstrap peers were given, at least one of
// them is connected.
func readyChecks(n *node.Node, st *store.Store, bootstrap []ma.Multiaddr) map[string]metrics.Check {
	checks := map[string]metrics.Check{
		"host": func() error {
			if len(n.Host().Network().ListenAddresses()) == 0 {
				return errors.New("not listening on any address")
			}
			return nil
		},
		"store": func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if _, _, err := st.NextDue(ctx); err != nil {
				return fmt.Errorf("the message store does not answer: %w", err)
			}
			return nil
		},
	}
	var peers []peer.ID
	for _, m := range bootstrap {
		if ai, err := peer.AddrInfoFromP2pAddr(m); err == nil {
			peers = append(peers, ai.ID)
		}
	}
	if len(peers) > 0 {
		checks["bootstrap"] = func() error {
			for _, p := range peers {
				if n.Host().Network().Connectedness(p) == network.Connected {
					return nil
				}
			}
			return fmt.Errorf("none of the %d bootstrap peers is connected", len(peers))
		}
	}
	return checks
}
