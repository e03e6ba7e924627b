package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ucli "github.com/urfave/cli/v2"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/daemon"
	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// *node.Node is the mesh the lobby reaches.
var (
	_ lobby.Mesh       = (*node.Node)(nil)
	_ lobby.Discoverer = (*node.Node)(nil)
)

// defaultWSAddr is where a relay serves its public bus and lobby.
const defaultWSAddr = "0.0.0.0:7892"

// Flags of the relay's public listener.
const (
	flagTokens  = "tokens"
	flagTLSCert = "tls-cert"
	flagTLSKey  = "tls-key"
	// flagMaxClients bounds the WebSocket connections of the relay's bus
	// server (its --ws and --api together).
	flagMaxClients = "max-clients"
)

// maxMaxClients bounds --max-clients: more connections than a process
// has file descriptors for cannot be held anyway.
const maxMaxClients = 1 << 20

// publicSettings configure a relay's public listener.
type publicSettings struct {
	addr       string
	tokensPath string
	tokens     *rpc.Tokens // nil: anonymous clients
	tls        *tls.Config // nil: plain ws
	// maxClients bounds the bus server's connections (0: the default,
	// rpc.DefaultMaxClients).
	maxClients int
}

// limits returns the bus server's connection limits under p.
func (p publicSettings) limits() rpc.Limits {
	l := rpc.DefaultLimits()
	if p.maxClients > 0 {
		l.MaxClients = p.maxClients
	}
	return l
}

// resolvePublic validates the public listener's flags.
func (r *runState) resolvePublic(c *ucli.Context) (publicSettings, error) {
	p := publicSettings{addr: c.String(flagWS), maxClients: c.Int(flagMaxClients)}
	if _, err := r.hostPort(c, flagWS, p.addr); err != nil {
		return p, err
	}
	if p.maxClients < 1 || p.maxClients > maxMaxClients {
		return p, r.flagError(c, flagMaxClients, "%d is not between 1 and %d", p.maxClients, maxMaxClients)
	}
	if p.tokensPath = expandHome(c.String(flagTokens)); p.tokensPath != "" {
		var err error
		if p.tokens, err = rpc.LoadTokens(p.tokensPath); err != nil {
			return p, r.flagError(c, flagTokens, "%v", err)
		}
	}
	cert, key := expandHome(c.String(flagTLSCert)), expandHome(c.String(flagTLSKey))
	switch {
	case cert == "" && key == "":
	case cert == "" || key == "":
		return p, r.flagError(c, flagTLSCert, "--tls-cert and --tls-key go together")
	default:
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return p, r.flagError(c, flagTLSCert, "cannot load the certificate and key: %v", err)
		}
		p.tls = &tls.Config{Certificates: []tls.Certificate{kp}, MinVersion: tls.VersionTLS12}
	}
	return p, nil
}

// warnings names the risks of the public listener's settings.
func (p publicSettings) warnings(log *slog.Logger) {
	host, _, _ := net.SplitHostPort(p.addr)
	if isLoopback(host) {
		return
	}
	if p.tokens == nil {
		log.Warn("the public bus and lobby are open to anyone who reaches --ws: without --tokens any client can "+
			"subscribe to and send on every topic and register in the lobby; admin methods and mesh.* stay refused",
			"ws", p.addr)
	} else if p.tls == nil {
		log.Warn("tokens travel in clear text: --ws is not a loopback address and has no --tls-cert; "+
			"anyone on the path can read them", "ws", p.addr)
	}
}

func (r *runState) relayCommand() *ucli.Command {
	nc := r.nodeCommand()
	flags := []ucli.Flag{
		stringFlag(flagWS, defaultWSAddr, "`ADDR` (host:port) of the public bus (path /) and lobby (path /lobby)"),
		stringFlag(flagTokens, "", "tokens `FILE` (JSON): --ws then requires a token (?token= or Authorization: Bearer), each granting topics and methods; reloaded on change and SIGHUP"),
		stringFlag(flagTLSCert, "", "certificate `FILE` (PEM): --ws serves wss (TLS); needs --tls-key"),
		stringFlag(flagTLSKey, "", "private key `FILE` (PEM) of --tls-cert"),
		&ucli.IntFlag{Name: flagMaxClients, Value: rpc.DefaultMaxClients, EnvVars: []string{envVar(flagMaxClients)},
			Usage: "at most `N` WebSocket clients on --ws and --api together (an idle one costs at most 50 KiB); the open file limit must allow them"},
	}
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
			"It keeps direct messages and agent:<id> bus messages for agents that name it as their mailbox (--mailbox <this node's address>) " +
			"while they are offline, within bounds per agent and in all, for up to seven days. " +
			"With --api the local API serves the same bus. On --ws an anonymous client may initialize, ping, " +
			"subscribe, unsubscribe and sendMessage; bus.history, bus.deadLetters, bus.replay, mesh.* and calls to " +
			"mesh agents through agent:<id> need a token granting them (--tokens; then every connection needs one). " +
			"--tls-cert and --tls-key serve wss. " +
			"Prints the node's start line with \"ws <addr>\" added (--json: \"ws\").",
		Flags:  flags,
		Action: r.runRelay,
	}
}

func (r *runState) runRelay(c *ucli.Context) error {
	r.relayMode = true
	return r.runNode(c)
}

// frontDoors are the WebSocket listeners in front of a node: the
// loopback local API and, on a relay, the public listener, both serving
// one busServer (one bus, one retry loop over the store).
type frontDoors struct {
	api *apiServer      // loopback local API
	ws  *publicListener // the relay's --ws listener: bus and lobby
	// metrics is the --metrics listener (/metrics, /healthz, /readyz).
	metrics *opsServer
}

// startDoors serves the local API on api (unless "") and, when pub.addr
// is set, the public listener, from one server.
// ops (may be nil) answers the local API's other paths (/metrics,
// /healthz, /readyz) but the status page's (/ui); reg (may be nil)
// receives the bus's and the lobby's figures; seed003 (may be nil) is
// seed 003's REST surface.
func startDoors(n *node.Node, api string, pub publicSettings, log *slog.Logger, st *store.Store, base []node.Service, level *slog.LevelVar, ops http.Handler, reg prometheus.Registerer, seed003 *localapi.Seed003) (frontDoors, error) {
	var d frontDoors
	var srv *daemon.BusServer
	lim := pub.limits()
	if reg != nil {
		// What the bus server admits, beside meshagent_bus_clients.
		if err := reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meshagent_bus_max_clients",
			Help: "The most WebSocket clients the bus server holds (--max-clients)."}, func() float64 { return float64(lim.MaxClients) })); err != nil {
			return d, exitErrorf(ExitFailure, "metrics: %v", err)
		}
	}
	if api != "" {
		a, err := startAPI(n, api, log, st, reg, level, append(statusPage(ops, n, log, seed003), rpc.WithLimits(lim))...)
		if err != nil {
			return d, err
		}
		d.api, srv = a, a.srv
	}
	if pub.addr != "" {
		ws, err := startPublicListener(n, srv, pub, log, st, base, reg)
		if err != nil {
			return d, errors.Join(err, d.close(context.Background()))
		}
		d.ws = ws
	}
	return d, nil
}

// close stops the public listener, then the server and its clients.
func (d frontDoors) close(ctx context.Context) error {
	var errs []error
	if d.metrics != nil {
		errs = append(errs, d.metrics.close(ctx))
	}
	if d.ws != nil {
		errs = append(errs, d.ws.close(ctx))
	}
	if d.api != nil {
		errs = append(errs, d.api.close(ctx))
	}
	return errors.Join(errs...)
}

// reloadTokens re-reads the public listener's tokens file. A file that
// does not load leaves the current tokens in place.
func (d frontDoors) reloadTokens(log *slog.Logger) {
	p := d.ws.pub
	if err := p.tokens.Reload(p.tokensPath); err != nil {
		log.Error("tokens not reloaded; keeping the current ones", "path", p.tokensPath, "err", err)
		return
	}
	dropped := d.ws.srv.DropRevoked()
	log.Info("tokens reloaded", "path", p.tokensPath, "count", p.tokens.Len(), "revoked_connections", dropped)
}

// setServices returns how the node's own capabilities are replaced: on a
// relay, merged with its lobby agents'.
func (d frontDoors) setServices(n *node.Node) func([]node.Service) error {
	if d.ws != nil {
		return d.ws.setBase
	}
	return n.SetServices
}

// publicListener is a relay's public (--ws) listener: the bus at "/" and
// the lobby at "/lobby", behind the tokens when there are some, over TLS
// when configured.
type publicListener struct {
	addr  string
	url   string // ws:// or wss://
	pub   publicSettings
	srv   *daemon.BusServer // the bus server
	own   *daemon.BusServer // srv, when there is no local API to share it
	lobby *lobby.Lobby
	hs    *http.Server
	done  chan error

	n          *node.Node
	log        *slog.Logger
	mu         sync.Mutex
	base       []node.Service  // the relay's own capabilities
	lobbyOffer []lobby.Service // the lobby agents' capabilities, as last offered
}

// startPublicListener serves srv's public side (the local API's server, so
// that a process has one bus; nil: a server of its own) and the lobby for
// n on pub.addr, reachable from anywhere, and offers the lobby agents'
// capabilities in the mesh as the relay's own (next to base, the relay's
// capabilities file), so mesh agents discover and call them. reg (may be
// nil) receives the lobby's figures, and the bus's when it is its own.
func startPublicListener(n *node.Node, srv *daemon.BusServer, pub publicSettings, log *slog.Logger, st *store.Store, base []node.Service, reg prometheus.Registerer) (*publicListener, error) {
	var own *daemon.BusServer
	if srv == nil {
		var err error
		if own, err = daemon.NewBusServer(n, log.With("component", "relay"), []rpc.Option{rpc.WithLimits(pub.limits())}, bus.WithStore(st), bus.WithMetrics(reg)); err != nil {
			return nil, exitErrorf(ExitFailure, "bus: %v", err)
		}
		srv = own
	}
	lb, err := lobby.New(n, st, lobby.WithLogger(log.With("component", "lobby")), lobby.WithMetrics(reg))
	if err != nil {
		if own != nil {
			_ = own.Close()
		}
		return nil, exitErrorf(ExitFailure, "lobby: %v", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", srv.PublicHandler())
	mux.Handle("/lobby", lb)
	envelopes := agentProtocolGate(pub.tokens != nil, localapi.NewAgentProtocol(n, log.With("component", "agentprotocol")))
	mux.Handle(localapi.AgentProtocolPath, envelopes)
	mux.Handle(localapi.AgentProtocolWSPath, envelopes)
	var h http.Handler = mux
	if pub.tokens != nil {
		h = pub.tokens.Middleware(mux)
	}
	l, err := net.Listen("tcp", pub.addr)
	if err != nil {
		_ = lb.Close()
		if own != nil {
			_ = own.Close()
		}
		return nil, exitErrorf(ExitFailure, "the relay cannot listen on --ws %s: %v", pub.addr, err)
	}
	scheme := "ws"
	if pub.tls != nil {
		scheme = "wss"
		l = tls.NewListener(l, pub.tls)
	}
	p := &publicListener{addr: l.Addr().String(), pub: pub, srv: srv, own: own, lobby: lb, done: make(chan error, 1), n: n, log: log, base: base,
		hs: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}}
	p.url = scheme + "://" + p.addr + "/"
	lb.Bridge(p)
	go func() { p.done <- p.hs.Serve(l) }()
	pub.warnings(log)
	log.Info("relay serving", "ws", p.addr, "bus", p.url, "lobby", p.url+"lobby",
		"tokens", pub.tokens != nil, "tls", pub.tls != nil)
	return p, nil
}

// grantAgentProtocol is the token grant (a method name in a credential's
// methods) that admits a client to seed 002's bindings on a relay's public
// listener.
const grantAgentProtocol = "agentprotocol"

// agentProtocolGate serves seed 002's bindings on the public listener:
// with tokens, only to a credential granting grantAgentProtocol (the
// envelope's own signature names the sender; the token says who may use
// the relay), as the bus's methods beyond its own need a grant; without
// tokens, to anyone, as the bus is.
func agentProtocolGate(tokens bool, ap http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tokens && !rpc.CredentialFromContext(r.Context()).AllowsMethod(grantAgentProtocol) {
			http.Error(w, "this token does not grant "+grantAgentProtocol+" (seed 002's bindings)", http.StatusForbidden)
			return
		}
		ap.ServeHTTP(w, r)
	})
}

// setBase replaces the relay's own capabilities.
func (p *publicListener) setBase(ss []node.Service) error {
	p.mu.Lock()
	p.base = ss
	p.mu.Unlock()
	return p.apply()
}

// Offer takes the lobby agents' capabilities from the lobby's bridge
// (lobby.Offerer) and offers them next to the relay's own.
func (p *publicListener) Offer(ss []lobby.Service) error {
	p.mu.Lock()
	p.lobbyOffer = ss
	p.mu.Unlock()
	return p.apply()
}

// apply offers the relay's own capabilities and, under names it does not
// use itself, its lobby agents' capabilities.
func (p *publicListener) apply() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	merged := append([]node.Service(nil), p.base...)
	own := map[string]bool{}
	for _, s := range p.base {
		own[s.Capability.Name] = true
	}
	for _, s := range p.lobbyOffer {
		if own[s.Capability.Name] {
			p.log.Warn("a lobby capability has the name of one of the relay's own; the relay's wins", "capability", s.Capability.Name)
			continue
		}
		merged = append(merged, lobbyService(s))
	}
	return p.n.SetServices(merged)
}

// lobbyService serves a lobby capability as one of the node's own, for
// the requester as the node verified it (with the client it vouches for,
// if any).
func lobbyService(s lobby.Service) node.Service {
	return node.Service{Capability: s.Capability, Handler: node.HandlerFunc(func(ctx context.Context, call *node.Call) (json.RawMessage, error) {
		return s.Serve(ctx, call.Requester(), call.Request.Params)
	})}
}

// close stops accepting and closes the lobby, and the bus server if it is
// its own (a shared one is closed with the local API).
func (p *publicListener) close(ctx context.Context) error {
	var errs []error
	if err := p.hs.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("relay: %w", err))
	}
	if err := <-p.done; !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, err)
	}
	errs = append(errs, p.lobby.Close())
	if p.own != nil {
		errs = append(errs, p.own.Close())
	}
	return errors.Join(errs...)
}
