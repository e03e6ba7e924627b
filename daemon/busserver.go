package daemon

import (
	"errors"
	"log/slog"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/rpc"
)

// BusServer is the JSON-RPC server with seed 001's bus on it: what a
// node's local API and a relay's public listener serve, and what the tests
// of rpc, bus and the clients talk to. It is put together here only.
type BusServer struct {
	*rpc.Server
	// Bus is the bus served on Server; it calls mesh agents through the
	// server's mesh.
	Bus *bus.Bus
}

// NewBusServer composes the JSON-RPC server for mesh and the bus on it.
// What each serves beyond mesh is stated in its options: the bus's topics
// reach the mesh only with bus.WithTopics (a node's local API and a
// relay's server give it the node). log is both's logger (before rpcOpts and busOpts, which may replace it);
// the bus stamps messages with the server's clock. The caller closes it.
func NewBusServer(mesh rpc.Mesh, log *slog.Logger, rpcOpts []rpc.Option, busOpts ...bus.Option) (*BusServer, error) {
	srv, err := rpc.New(mesh, append([]rpc.Option{rpc.WithLogger(log)}, rpcOpts...)...)
	if err != nil {
		return nil, err
	}
	b, err := bus.New(srv, mesh, append([]bus.Option{bus.WithLogger(log), bus.WithClock(srv.Now)}, busOpts...)...)
	if err != nil {
		return nil, errors.Join(err, srv.Close())
	}
	return &BusServer{Server: srv, Bus: b}, nil
}

// Close closes the server and its clients, then the bus (its retry loop
// and history writer), so that no request reaches a closed bus.
func (s *BusServer) Close() error { return errors.Join(s.Server.Close(), s.Bus.Close()) }
