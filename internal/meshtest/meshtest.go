package meshtest

import (
	"context"
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/sign"
)

// Key returns a deterministic Ed25519 key for index i.
func Key(t testing.TB, i int) crypto.PrivKey {
	t.Helper()
	seed := sha256.Sum256([]byte(fmt.Sprintf("meshtest-%d", i)))
	k, err := sign.KeyFromSeed(seed[:])
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// ID returns the agent id of Key(t, i).
func ID(t testing.TB, i int) peer.ID {
	t.Helper()
	id, err := peer.IDFromPrivateKey(Key(t, i))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// Context returns a context cancelled at the end of the test or after d.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Loopback is the listen address tests use: TCP on 127.0.0.1, random port.
var Loopback = ma.StringCast("/ip4/127.0.0.1/tcp/0")

// Node starts a node with key index i on loopback, mDNS and the DHT off,
// and closes it at the end of the test.
func Node(t testing.TB, i int, opts ...node.Option) *node.Node {
	t.Helper()
	base := []node.Option{
		node.WithIdentity(Key(t, i)),
		node.WithListenAddrs(Loopback),
		node.WithMDNS(false),
		node.WithDHT(false), // tests that need discovery turn it on
		node.WithLogger(testlog.New(t)),
		node.WithName(fmt.Sprintf("agent-%d", i)),
	}
	n, err := node.New(append(base, opts...)...)
	if err != nil {
		t.Fatalf("node %d: %v", i, err)
	}
	t.Cleanup(func() { _ = n.Close() })
	return n
}

// Connect connects a to b and waits until each has b's/a's hello.
func Connect(t testing.TB, a, b *node.Node) {
	t.Helper()
	ctx := Context(t, 10*time.Second)
	if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WaitHello(ctx, b.ID()); err != nil {
		t.Fatalf("%s has no hello from %s: %v", a.ID(), b.ID(), err)
	}
	if _, err := b.WaitHello(ctx, a.ID()); err != nil {
		t.Fatalf("%s has no hello from %s: %v", b.ID(), a.ID(), err)
	}
}
