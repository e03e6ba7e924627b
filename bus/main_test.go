package bus_test

import (
	"context"
	"testing"

	"go.uber.org/goleak"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/internal/wstest"
	"github.com/meshagent/meshagent/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The fake mesh's agent ids.
const (
	selfID = fakemesh.SelfID
	peerID = fakemesh.PeerID
)

// testTimeout bounds every wait in these tests.
const testTimeout = rpctest.Timeout

// newStack builds what these tests serve, an rpc.Server with a bus on it
// (as a node's local API and a relay's public listener serve them), over
// mesh. The caller closes it.
func newStack(tb testing.TB, mesh rpc.Mesh, opts ...rpctest.Option) (*rpctest.Stack, error) {
	return rpctest.New(tb, mesh, append([]rpctest.Option{rpctest.WithBus()}, opts...)...)
}

// The shared helpers under the short names these tests use.
var (
	dialClient = rpctest.DialClient
	dialRaw    = rpctest.DialRaw
	writeFrame = wstest.WriteFrame
	readFrame  = wstest.ReadFrame
)

// waitFor polls cond until it holds or the test timeout passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.ForTrue(t, testTimeout, what, cond)
}

// receive waits for one value on ch, or fails the test.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return wait.Receive(t, testTimeout, ch, what)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}
