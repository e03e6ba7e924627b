package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/relay"
)

// *node.Node is what the local API serves.
var _ relay.Mesh = (*node.Node)(nil)

// apiURL is the WebSocket URL of the local API at addr (host:port).
func apiURL(addr string) string { return "ws://" + addr + "/" }

// dialAPI connects to the local API of a running node.
func dialAPI(ctx context.Context, addr string) (*relay.Client, error) {
	return relay.Dial(ctx, apiURL(addr))
}

// apiServer is a node's local API: the relay's JSON-RPC server on a
// loopback listener.
type apiServer struct {
	addr   string // the address bound, with the real port
	srv    *relay.Server
	failed chan error // receives Serve's error if it stops by itself
	done   chan struct{}
}

// startAPI serves the local API for n on addr.
func startAPI(n *node.Node, addr string, log *slog.Logger) (*apiServer, error) {
	srv, err := relay.New(n, relay.WithLogger(log))
	if err != nil {
		return nil, exitErrorf(ExitFailure, "local API: %v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		_ = srv.Close()
		return nil, exitErrorf(ExitFailure, "the local API cannot listen on %s: %v; is another node using it? "+
			"pass --api with another address (port 0 picks a free one), or --api off", addr, err)
	}
	a := &apiServer{addr: ln.Addr().String(), srv: srv, failed: make(chan error, 1), done: make(chan struct{})}
	go func() {
		defer close(a.done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, relay.ErrClosed) {
			a.failed <- err
		}
	}()
	log.Info("local API listening", "addr", a.addr, "url", apiURL(a.addr))
	return a, nil
}

// close disconnects every client and stops serving; it returns once the
// serving goroutine has, or when ctx ends.
func (a *apiServer) close(ctx context.Context) error {
	err := a.srv.Close()
	select {
	case <-a.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("local API: %w", ctx.Err())
	}
}
