package cli

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/daemon"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// *node.Node is what the local API serves, and *rpc.Server serves the bus.
var (
	_ rpc.Mesh              = (*node.Node)(nil)
	_ rpc.Discoverer        = (*node.Node)(nil)
	_ rpc.Publisher         = (*node.Node)(nil)
	_ rpc.IDPublisher       = (*node.Node)(nil)
	_ rpc.Consenter         = (*node.Node)(nil)
	_ rpc.Tasker            = (*node.Node)(nil)
	_ rpc.AnyCaller         = (*node.Node)(nil)
	_ rpc.DurableSubscriber = (*node.Node)(nil)
	_ rpc.DurableForgetter  = (*node.Node)(nil)
	_ rpc.DurableLister     = (*node.Node)(nil)
	_ bus.Mesh              = (*node.Node)(nil)
	_ bus.Forwarder         = (*node.Node)(nil)
	_ bus.Registrar         = (*rpc.Server)(nil)
)

// dialAPI connects to the local API of a running node at addr (host:port)
// and initializes (as a fresh meshagent-go-… client id). If nothing
// listens there the error wraps rpc.ErrNoServer.
func dialAPI(ctx context.Context, addr string) (*rpc.Client, error) {
	// A bare host:port means ws://host:port/.
	return rpc.Dial(ctx, addr, rpc.WithClientInfo(rpc.ClientInfo{Name: "meshagent", Version: "cli"}))
}

// apiServer is a node's local API: the bus server on a loopback address.
// On a relay the public listener serves the same server (one bus, one
// retry loop).
type apiServer struct {
	addr string // the address bound, with the real port
	srv  *daemon.BusServer
}

// localTimeout bounds the commands that only ask the local node (peers,
// status, connect's own round trip, log-level, id --api, task).
const localTimeout = 10 * time.Second

// startAPI serves the local API for n on addr and returns once listening.
// st (may be nil) persists the bus's outbox, dead letters and history; reg
// (may be nil) receives the bus's figures. level is the process's log
// level, which the API's mesh.logLevel changes.
func startAPI(n *node.Node, addr string, log *slog.Logger, st *store.Store, reg prometheus.Registerer, level *slog.LevelVar, extra ...rpc.Option) (*apiServer, error) {
	srv, err := daemon.NewBusServer(n, log.With("component", "api"), append([]rpc.Option{rpc.WithControl(nodeControl{n: n, level: level}), rpc.WithProvider(nodeProvider{n: n})}, extra...),
		bus.WithStore(st), bus.WithMetrics(reg))
	if err != nil {
		return nil, exitErrorf(ExitFailure, "local API: %v", err)
	}
	if err := srv.Start(addr); err != nil {
		_ = srv.Close()
		return nil, exitErrorf(ExitFailure, "the local API cannot listen on %s: %v; is another node using it? "+
			"pass --api with another address (port 0 picks a free one), or --api off", addr, err)
	}
	return &apiServer{addr: srv.Addr().String(), srv: srv}, nil
}

// close disconnects every client and stops serving. It returns when the
// server has stopped, or with an error when ctx ends first.
func (a *apiServer) close(ctx context.Context) error {
	done := make(chan error, 1)
	go func() { done <- a.srv.Close() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("local API: %w", ctx.Err())
	}
}
