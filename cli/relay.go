package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
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

// setServices returns how the node's own capabilities are replaced: on a
// relay, merged with its lobby agents'.
func (d frontDoors) setServices(n *node.Node) func([]node.Service) error {
	if d.ws != nil {
		return d.ws.setBase
	}
	return n.SetServices
}

// publicBus is a relay's public endpoint: the bus at "/" and the lobby at
// "/lobby".
type publicBus struct {
	addr  string
	bus   *relay.Server
	lobby *relay.Lobby
	hs    *http.Server
	done  chan error

	n    *node.Node
	log  *slog.Logger
	mu   sync.Mutex
	base []node.Service // the relay's own capabilities
}

// startPublicBus serves the bus and the lobby for n on addr, reachable
// from anywhere, and offers the lobby agents' capabilities in the mesh as
// the relay's own (next to base, the relay's capabilities file), so mesh
// agents discover and call them.
func startPublicBus(n *node.Node, addr string, log *slog.Logger, st *store.Store, base []node.Service) (*publicBus, error) {
	bus, err := relay.New(n, relay.WithLogger(log), relay.WithStore(st))
	if err != nil {
		return nil, exitErrorf(ExitFailure, "bus: %v", err)
	}
	lobby, err := relay.NewLobby(n, st, relay.WithLobbyLogger(log.With("component", "lobby")))
	if err != nil {
		_ = bus.Close()
		return nil, exitErrorf(ExitFailure, "lobby: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", bus)
	mux.Handle("/lobby", lobby)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		_ = bus.Close()
		_ = lobby.Close()
		return nil, exitErrorf(ExitFailure, "the relay cannot listen on --ws %s: %v", addr, err)
	}
	p := &publicBus{addr: l.Addr().String(), bus: bus, lobby: lobby, done: make(chan error, 1), n: n, log: log, base: base,
		hs: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	lobby.OnChange(func() {
		if err := p.apply(); err != nil {
			log.Error("lobby capabilities not offered in the mesh", "err", err)
		}
	})
	go func() { p.done <- p.hs.Serve(l) }()
	log.Info("relay serving", "ws", p.addr, "bus", "ws://"+p.addr+"/", "lobby", "ws://"+p.addr+"/lobby")
	return p, nil
}

// setBase replaces the relay's own capabilities.
func (p *publicBus) setBase(ss []node.Service) error {
	p.mu.Lock()
	p.base = ss
	p.mu.Unlock()
	return p.apply()
}

// apply offers the relay's own capabilities and, under names it does not
// use itself, its lobby agents' capabilities. A lobby capability's
// authorized_requester_ids (lobby ids) are enforced by the lobby (seed 000
// §5.3), so the mesh copy carries none.
func (p *publicBus) apply() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	merged := append([]node.Service(nil), p.base...)
	own := map[string]bool{}
	for _, s := range p.base {
		own[s.Capability.Name] = true
	}
	for _, c := range p.lobby.Capabilities() {
		if own[c.Name] {
			p.log.Warn("a lobby capability has the name of one of the relay's own; the relay's wins", "capability", c.Name)
			continue
		}
		c.AuthorizedRequesterIDs = nil
		name := c.Name
		merged = append(merged, node.Service{Capability: c, Handler: node.HandlerFunc(func(ctx context.Context, call *node.Call) (json.RawMessage, error) {
			return p.lobby.Serve(ctx, call.From.String(), name, call.Request.Params)
		})})
	}
	return p.n.SetServices(merged)
}

func (p *publicBus) close(ctx context.Context) error {
	errs := []error{p.lobby.Close(), p.bus.Close()}
	if err := p.hs.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("relay: %w", err))
	}
	if err := <-p.done; !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
