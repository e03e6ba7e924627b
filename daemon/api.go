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
// The node's topics carry the bus's (bus.WithTopics takes an
// rpc.IDPublisher: the bus publishes under its own message ids).
var (
	_ rpc.Mesh        = (*node.Node)(nil)
	_ rpc.IDPublisher = (*node.Node)(nil)
	_ localapi.Node   = (*node.Node)(nil)
	_ bus.Mesh        = (*node.Node)(nil)
	_ bus.Forwarder   = (*node.Node)(nil)
	_ bus.Registrar   = (*rpc.Server)(nil)
)

// nodeServes states what a server over n serves beyond rpc.Mesh, on the
// local API and on a relay's own public server alike: the node's topics
// (mesh.publish, mesh.subscribe and seed 004's broadcasts), its durable
// subscriptions, and mesh.call without "agentId".
func nodeServes(n *node.Node) []rpc.Option {
	return []rpc.Option{rpc.WithTopics(n), rpc.WithDurables(n), rpc.WithAnyCaller(n)}
}

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
	opts := append(nodeServes(n), rpc.WithControl(nodeControl{n: n, level: level}), rpc.WithProvider(nodeProvider{n: n}))
	srv, err := NewBusServer(n, log.With("component", "api"), append(opts, extra...),
		bus.WithTopics(n), bus.WithForwarder(n), bus.WithStore(st), bus.WithMetrics(reg))
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
