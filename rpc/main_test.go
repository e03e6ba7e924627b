package rpc_test

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

// The fake mesh's agent ids, which the transcripts name.
const (
	selfID  = fakemesh.SelfID
	peerID  = fakemesh.PeerID
	peerB64 = fakemesh.PeerB64
)

// testTimeout bounds every wait in these tests.
const testTimeout = rpctest.Timeout

// testServer is an rpc.Server with a fake mesh, served on a loopback port
// with the fixed clock until the test ends.
type testServer struct {
	srv  *rpc.Server
	mesh *fakemesh.Mesh
	url  string
}

func newTestServer(t *testing.T, opts ...rpc.Option) *testServer {
	t.Helper()
	mesh := fakemesh.New()
	return serveMesh(t, mesh, mesh, opts...)
}

// serveMesh is newTestServer for m, which is mesh or embeds it (as
// topicMesh does).
func serveMesh(t *testing.T, m rpc.Mesh, mesh *fakemesh.Mesh, opts ...rpc.Option) *testServer {
	t.Helper()
	s := rpctest.Start(t, m, rpctest.WithRPC(append([]rpc.Option{rpc.WithClock(rpctest.Clock)}, opts...)...))
	return &testServer{srv: s.Server, mesh: mesh, url: s.URL}
}

// The shared helpers under the short names these tests use.
var (
	dialClient   = rpctest.DialClient
	dialRaw      = rpctest.DialRaw
	dialBare     = rpctest.DialBare
	writeFrame   = wstest.WriteFrame
	readFrame    = wstest.ReadFrame
	expectClosed = wstest.ExpectClosed
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
