package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/relay"
	"github.com/meshagent/meshagent/store"
)

// defaultWSAddr is where a relay serves its public bus and lobby.
const defaultWSAddr = "0.0.0.0:7892"

func (r *runState) relayCommand() *ucli.Command {
	nc := r.nodeCommand()
	flags := []ucli.Flag{stringFlag(flagWS, defaultWSAddr, "`ADDR` (host:port) of the public bus (path /) and lobby (path /lobby)")}
	for _, f := range nc.Flags {
		if f.Names()[0] == flagAPI {
			// The relay's bus is public on --ws; a loopback API as well
			// is opt-in (and would clash with --ws's default port).
			f = stringFlag(flagAPI, "off", "`ADDR` (host:port) of a loopback local API as well, or off")
		}
		flags = append(flags, f)
	}
	return &ucli.Command{
		Name:  "relay",
		Usage: "run a node that also serves the bus and the lobby over WebSocket, and relays for others",
		Description: "Runs a node (every `node` flag applies) that also serves seed 001's message bus " +
			"(JSON-RPC 2.0 over WebSocket at path /) and seed 000's lobby (path /lobby) on --ws for " +
			"clients anywhere, bridged into the mesh, and a libp2p circuit relay (v2) so that agents " +
			"that cannot be dialled are reached through it (they start with --relay <this node's address>). " +
			"Prints the node's start line with \"ws <addr>\" added (--json: \"ws\").",
		Flags:  flags,
		Action: r.runRelay,
	}
}

func (r *runState) runRelay(c *ucli.Context) error {
	r.relayMode = true
	return r.runNode(c)
}

// frontDoors are the WebSocket servers in front of a node.
type frontDoors struct {
	api *apiServer // loopback local API
	ws  *publicBus // the relay's public bus and lobby
}

func (d frontDoors) close(ctx context.Context) error {
	var errs []error
	if d.ws != nil {
		errs = append(errs, d.ws.close(ctx))
	}
	if d.api != nil {
		errs = append(errs, d.api.close(ctx))
	}
	return errors.Join(errs...)
}

// publicBus is a relay's public endpoint: the bus at "/" (and the lobby at
// "/lobby" when mounted).
type publicBus struct {
	addr string
	bus  *relay.Server
	hs   *http.Server
	done chan error
}

// startPublicBus serves the bus for n on addr, reachable from anywhere.
func startPublicBus(n *node.Node, addr string, log *slog.Logger, st *store.Store) (*publicBus, error) {
	bus, err := relay.New(n, relay.WithLogger(log), relay.WithStore(st))
	if err != nil {
		return nil, exitErrorf(ExitFailure, "bus: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", bus)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		_ = bus.Close()
		return nil, exitErrorf(ExitFailure, "the relay cannot listen on --ws %s: %v", addr, err)
	}
	p := &publicBus{addr: l.Addr().String(), bus: bus, done: make(chan error, 1),
		hs: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() { p.done <- p.hs.Serve(l) }()
	log.Info("relay serving", "ws", p.addr, "bus", "ws://"+p.addr+"/", "lobby", "ws://"+p.addr+"/lobby")
	return p, nil
}

func (p *publicBus) close(ctx context.Context) error {
	errs := []error{p.bus.Close()}
	if err := p.hs.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("relay: %w", err))
	}
	if err := <-p.done; !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
