package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/p2ptest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// TestIdleConnectionsDoNotLockOut: more idle connections from fresh
// identities than the node admits arrive at once; a fresh honest agent must
// still connect and complete a signed call within 2 s. With the connection
// manager's high water above the resource manager's inbound limit (the
// old settings) the newcomer was refused for as long as the idle ones
// stayed.
func TestIdleConnectionsDoNotLockOut(t *testing.T) {
	lim := node.ConnLimits{MaxInbound: 16, MaxConns: 32, HighWater: 12, LowWater: 6, GracePeriod: 10 * time.Second, TrimInterval: time.Second}
	p := meshtest.Node(t, 2, node.WithConnLimits(lim), node.WithServices(echoService("echo")))
	target := peer.AddrInfo{ID: p.ID(), Addrs: p.Host().Addrs()}

	const idle = 24 // more than MaxInbound
	var wg sync.WaitGroup
	for range idle {
		h := p2ptest.Host(t) // a fresh identity each
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = h.Connect(ctx, target) // some are refused; that is the point
		})
	}
	wg.Wait()
	inbound := 0
	for _, c := range p.Host().Network().Conns() {
		if c.Stat().Direction == network.DirInbound {
			inbound++
		}
	}
	if inbound >= lim.MaxInbound {
		t.Logf("%d inbound connections held by idle peers", inbound)
	}

	honest := meshtest.Node(t, 1)
	start := time.Now()
	ctx := meshtest.Context(t, 2*time.Second)
	if err := honest.Connect(ctx, target); err != nil {
		t.Fatalf("honest peer refused after %v: %v", time.Since(start), err)
	}
	if _, err := honest.Call(ctx, callRequest(p, "echo", `{"ok":true}`)); err != nil {
		t.Fatalf("honest call failed after %v: %v", time.Since(start), err)
	}
	t.Logf("honest peer connected and called in %v", time.Since(start))
}

func callRequest(to *node.Node, action, params string) protocol.CallRequest {
	return protocol.CallRequest{To: to.AgentID(), Action: action, Params: json.RawMessage(params), Timeout: 2 * time.Second}
}

// TestBootstrapPeersReleasedOnceConnected: a node protects its bootstrap
// peer from the connection manager while it has few other peers, stops
// once it has BootstrapEnough others (the bootstrap peer is then a peer
// like any other, which the manager may trim), and protects it again
// when those others leave.
func TestBootstrapPeersReleasedOnceConnected(t *testing.T) {
	boot := meshtest.Node(t, 1)
	n := meshtest.Node(t, 2, node.WithBootstrap(boot.Addrs()...))
	protected := func(want bool) func() error {
		return func() error {
			if n.Host().Network().Connectedness(boot.ID()) != network.Connected {
				return fmt.Errorf("not connected to the bootstrap peer")
			}
			if got := n.Host().ConnManager().IsProtected(boot.ID(), node.TagBootstrap); got != want {
				return fmt.Errorf("bootstrap peer protected %v, want %v (%d peers connected)", got, want, len(n.Host().Network().Peers()))
			}
			return nil
		}
	}
	if err := wait.Until(30*time.Second, protected(true)); err != nil {
		t.Fatal(err)
	}
	target := peer.AddrInfo{ID: n.ID(), Addrs: n.Host().Addrs()}
	var others []host.Host
	for range node.BootstrapEnough {
		h := p2ptest.Host(t)
		if err := h.Connect(meshtest.Context(t, 10*time.Second), target); err != nil {
			t.Fatal(err)
		}
		others = append(others, h)
	}
	if err := wait.Until(30*time.Second, protected(false)); err != nil {
		t.Fatalf("with %d other peers: %v", node.BootstrapEnough, err)
	}
	for _, h := range others {
		_ = h.Close()
	}
	if err := wait.Until(30*time.Second, protected(true)); err != nil {
		t.Fatalf("once the others left: %v", err)
	}
}
