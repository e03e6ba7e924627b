package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// *node.Node is what the local API serves, and *rpc.Server serves the bus.
var (
	_ rpc.Mesh              = (*node.Node)(nil)
	_ rpc.Publisher         = (*node.Node)(nil)
	_ rpc.IDPublisher       = (*node.Node)(nil)
	_ rpc.AnyCaller         = (*node.Node)(nil)
	_ rpc.DurableSubscriber = (*node.Node)(nil)
	_ localapi.Node         = (*node.Node)(nil)
	_ bus.Mesh              = (*node.Node)(nil)
	_ bus.Forwarder         = (*node.Node)(nil)
	_ bus.Registrar         = (*rpc.Server)(nil)
)

// apiServer is a node's local API: the bus server on a loopback address.
// On a relay the public listener serves the same server (one bus, one
// retry loop).
type apiServer struct {
	addr string // the address bound, with the real port
	srv  *BusServer
}

// startAPI serves the local API for n on addr and returns once listening.
// st (may be nil) persists the bus's outbox, dead letters and history; reg
// (may be nil) receives the bus's figures. level is the process's log
// level, which the API's mesh.logLevel changes.
func startAPI(n *node.Node, addr string, log *slog.Logger, st *store.Store, reg prometheus.Registerer, level *slog.LevelVar, extra ...rpc.Option) (*apiServer, error) {
	srv, err := NewBusServer(n, log.With("component", "api"), append([]rpc.Option{rpc.WithControl(nodeControl{n: n, level: level}), rpc.WithProvider(nodeProvider{n: n})}, extra...),
		bus.WithStore(st), bus.WithMetrics(reg))
	if err != nil {
		return nil, fmt.Errorf("local API: %w", err)
	}
	localapi.Register(srv.Server, n)
	localapi.RegisterOperator(srv.Server, n)
	if err := srv.Start(addr); err != nil {
		_ = srv.Close()
		return nil, &ListenError{Listener: ListenerAPI, Addr: addr, Err: err}
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
