package relay

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// Server is a JSON-RPC server (rpc.Server) with the seed 001 bus on it:
// what a node's local API and a relay's public listener serve. Its
// methods are rpc.Server's; Close also stops the bus.
type Server struct {
	*rpc.Server
	bus *bus
}

// options are New's settings.
type options struct {
	rpc   []rpc.Option
	bus   BusConfig
	store *store.Store
	log   *slog.Logger
}

// Option configures New.
type Option func(*options) error

// WithRPC passes options to the JSON-RPC server (rpc.WithLimits,
// rpc.WithOriginPatterns, rpc.WithControl, …).
func WithRPC(opts ...rpc.Option) Option {
	return func(o *options) error { o.rpc = append(o.rpc, opts...); return nil }
}

// WithBus replaces the bus configuration. Default: DefaultBusConfig().
func WithBus(b BusConfig) Option {
	return func(o *options) error { o.bus = b; return b.validate() }
}

// WithStore persists the bus's outbox, dead letters and history in st.
// Without one a failed delivery is reported in its ack and not retried,
// and bus.history, bus.deadLetters and bus.replay are not served. The
// caller keeps ownership: close it after the server.
func WithStore(st *store.Store) Option {
	return func(o *options) error { o.store = st; return nil }
}

// WithLogger sets the logger of the server and the bus. Default:
// slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return errors.New("nil logger")
		}
		o.log = l
		return nil
	}
}

// New returns a JSON-RPC server exposing mesh through the mesh.* methods,
// with the seed 001 bus on it. It does not listen (see rpc.Server).
func New(mesh rpc.Mesh, opts ...Option) (*Server, error) {
	o := options{bus: DefaultBusConfig(), log: slog.Default()}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("relay: %w", err)
		}
	}
	srv, err := rpc.New(mesh, append([]rpc.Option{rpc.WithLogger(o.log)}, o.rpc...)...)
	if err != nil {
		return nil, err
	}
	return &Server{Server: srv, bus: newBus(srv, mesh, o.bus, o.store, o.log)}, nil
}

// Close closes the server (see rpc.Server.Close), then stops the bus's
// retry loop and history writers.
func (s *Server) Close() error {
	err := s.Server.Close()
	s.bus.close()
	return err
}
