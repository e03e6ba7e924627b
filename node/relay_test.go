package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// natGater stands in for a NAT: it refuses every inbound connection that
// is not relayed, except from the relay itself.
type natGater struct{ relay peer.ID }

func (natGater) InterceptPeerDial(peer.ID) bool               { return true }
func (natGater) InterceptAddrDial(peer.ID, ma.Multiaddr) bool { return true }
func (natGater) InterceptAccept(network.ConnMultiaddrs) bool  { return true }
func (natGater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) {
	return true, 0
}

func (g natGater) InterceptSecured(dir network.Direction, p peer.ID, addrs network.ConnMultiaddrs) bool {
	if dir == network.DirOutbound || p == g.relay {
		return true
	}
	_, err := addrs.RemoteMultiaddr().ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}

// TestCircuitRelay: an agent behind a "NAT" reserves a slot on a relay
// node; another agent that cannot dial it directly says hello and calls it
// through the relay.
func TestCircuitRelay(t *testing.T) {
	relayNode := meshtest.Node(t, 60, node.WithRelayService(true))
	relayAddr := relayNode.Addrs()[0]
	hidden := meshtest.Node(t, 61,
		node.WithStaticRelays(relayAddr),
		node.WithHostOptions(libp2p.ConnectionGater(natGater{relay: relayNode.ID()})),
		node.WithServices(node.Service{Capability: protocol.Capability{Name: "echo"}, Handler: node.EchoHandler()}))
	caller := meshtest.Node(t, 62)

	// The hidden agent advertises a /p2p-circuit address once its
	// reservation is made.
	var circuit ma.Multiaddr
	wait.For(t, 30*time.Second, func() error {
		for _, a := range hidden.Host().Addrs() {
			if strings.Contains(a.String(), "/p2p-circuit") {
				circuit = a
				return nil
			}
		}
		return errors.New("no relay reservation yet")
	})

	ctx := meshtest.Context(t, 30*time.Second)
	// A direct dial fails: the gater refuses it.
	direct := peer.AddrInfo{ID: hidden.ID()}
	for _, a := range hidden.Host().Addrs() {
		if !strings.Contains(a.String(), "/p2p-circuit") {
			direct.Addrs = append(direct.Addrs, a)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_ = caller.Host().Connect(dctx, direct)
	cancel()
	// The dialler may finish its side of the handshake; the hidden agent
	// then drops the connection.
	wait.For(t, 10*time.Second, func() error {
		if n := len(caller.Host().Network().ConnsToPeer(hidden.ID())); n > 0 {
			return fmt.Errorf("%d direct connections to the hidden agent survive; the test's NAT does not hold", n)
		}
		return nil
	})
	_ = caller.Host().Network().ClosePeer(hidden.ID())
	caller.Host().Peerstore().ClearAddrs(hidden.ID())

	// The reservation may still be on its way: retry until the relay
	// connects us. Each try has its own bound, and the hello and the call
	// a fresh one, so a slow reservation on a loaded machine does not
	// leave them no time.
	wait.For(t, 30*time.Second, func() error {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return caller.Connect(cctx, peer.AddrInfo{ID: hidden.ID(), Addrs: []ma.Multiaddr{circuit}})
	})
	ctx = meshtest.Context(t, 30*time.Second)
	if _, err := caller.WaitHello(ctx, hidden.ID()); err != nil {
		t.Fatalf("hello through the relay: %v", err)
	}
	resp, err := caller.Call(ctx, protocol.CallRequest{To: hidden.AgentID(), Action: "echo", Params: json.RawMessage(`{"via":"relay"}`)})
	if err != nil || resp.Status != protocol.StatusSuccess || string(resp.Result) != `{"via":"relay"}` {
		t.Fatalf("call through the relay: %+v %v", resp, err)
	}
	for _, c := range caller.Host().Network().ConnsToPeer(hidden.ID()) {
		if _, err := c.RemoteMultiaddr().ValueForProtocol(ma.P_CIRCUIT); err != nil {
			t.Errorf("a direct connection to the hidden agent exists: %s", c.RemoteMultiaddr())
		}
	}

	// What the status page shows: the connection to the hidden agent as
	// relayed, the one to the relay as direct, and the call each way.
	kinds := map[string][]bool{}
	for _, c := range caller.Conns() {
		kinds[c.AgentID] = append(kinds[c.AgentID], c.Relayed)
	}
	if k := kinds[hidden.AgentID()]; len(k) == 0 || slices.Contains(k, false) {
		t.Errorf("Conns: the hidden agent's connections relayed %v, want all relayed", k)
	}
	if k := kinds[relayNode.AgentID()]; len(k) == 0 || slices.Contains(k, true) {
		t.Errorf("Conns: the relay's connections relayed %v, want all direct", k)
	}
	sent, served := caller.RecentCalls(), hidden.RecentCalls()
	if len(sent) == 0 || sent[0].Direction != protocol.CallSent || sent[0].Capability != "echo" || sent[0].AgentID != hidden.AgentID() || sent[0].Outcome != "success" {
		t.Errorf("the caller's last call: %+v", sent)
	}
	if len(served) == 0 || served[0].Direction != protocol.CallServed || served[0].Capability != "echo" || served[0].AgentID != caller.AgentID() || served[0].Outcome != "success" {
		t.Errorf("the hidden agent's last call: %+v", served)
	}
}
