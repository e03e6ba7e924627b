package node_test

import (
	"errors"
	"net"
	"strings"
	"testing"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/node"
)

// TestListenAddressInUse: a node must not share a TCP or QUIC port with
// another (SO_REUSEPORT would let both bind, and the kernel would split
// connections between them). The second node fails with *node.ListenError
// naming the address.
func TestListenAddressInUse(t *testing.T) {
	for _, proto := range []string{"tcp", "udp"} {
		t.Run(proto, func(t *testing.T) {
			first := meshtest.Node(t, 1, node.WithListenAddrs(freeAddr(t, proto)))
			var held ma.Multiaddr
			for _, a := range first.Host().Addrs() {
				if _, err := a.ValueForProtocol(ma.ProtocolWithName(proto).Code); err == nil {
					held = a
				}
			}
			if held == nil {
				t.Fatalf("first node has no %s address: %v", proto, first.Host().Addrs())
			}
			second, err := node.New(node.WithIdentity(meshtest.Key(t, 2)), node.WithListenAddrs(held),
				node.WithMDNS(false), node.WithDHT(false), node.WithLogger(testlog.New(t)))
			if err == nil {
				_ = second.Close()
				t.Fatalf("a second node listened on %s, held by the first", held)
			}
			var le *node.ListenError
			if !errors.As(err, &le) {
				t.Fatalf("error %v (%T) is not a *node.ListenError", err, err)
			}
			if !strings.Contains(err.Error(), held.String()) || !strings.Contains(err.Error(), "in use") {
				t.Errorf("error %q does not name the address %s as in use", err, held)
			}
			// The first node still serves and dials out.
			other := meshtest.Node(t, 3)
			meshtest.Connect(t, other, first)
			meshtest.Connect(t, first, meshtest.Node(t, 4))
		})
	}
}

// freeAddr returns a loopback listen multiaddr on a port free right now.
func freeAddr(t *testing.T, proto string) ma.Multiaddr {
	t.Helper()
	if proto == "tcp" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return ma.StringCast("/ip4/127.0.0.1/tcp/" + portOf(l.Addr().String()))
	}
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return ma.StringCast("/ip4/127.0.0.1/udp/" + portOf(c.LocalAddr().String()) + "/quic-v1")
}

func portOf(hostport string) string {
	_, p, _ := net.SplitHostPort(hostport)
	return p
}
