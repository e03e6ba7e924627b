package p2ptest

import (
	"testing"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"go.uber.org/goleak"
)

// VerifyTestMain runs the package's tests and fails if any goroutine is
// left behind, ignoring the workers libp2p keeps for the whole process.
func VerifyTestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/ipfs/go-log/v2/writer.(*MirrorWriter).logRoutine"),
		goleak.IgnoreTopFunction("github.com/libp2p/go-libp2p/p2p/transport/quicreuse.(*reuse).gc"),
		goleak.IgnoreAnyFunction("github.com/libp2p/go-libp2p/p2p/host/resource-manager.(*resourceManager).background"),
		goleak.IgnoreTopFunction("go.opencensus.io/stats/view.(*worker).start"),
		goleak.IgnoreAnyFunction("github.com/libp2p/go-cidranger/net.init"),
	)
}

// Host returns a libp2p host on a random 127.0.0.1 TCP port, closed at the
// end of the test.
func Host(t testing.TB) host.Host {
	t.Helper()
	h, err := libp2p.New(
		libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
		libp2p.DisableRelay(),
		libp2p.NoTransports,
		libp2p.DefaultTransports,
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}
