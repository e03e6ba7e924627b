package daemon

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

	"github.com/meshagent/meshagent/bus"
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

// publicListener is a relay's public (--ws) listener: the bus at "/" and
// the lobby at "/lobby", behind the tokens when there are some, over TLS
// when configured.
type publicListener struct {
	addr  string
	url   string // ws:// or wss://
	pub   Public
	srv   *BusServer // the bus server
	own   *BusServer // srv, when there is no local API to share it
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
func startPublicListener(ctx context.Context, n *node.Node, srv *BusServer, pub Public, log *slog.Logger, st *store.Store, base []node.Service, reg prometheus.Registerer) (*publicListener, error) {
	var own *BusServer
	if srv == nil {
		var err error
		if own, err = NewBusServer(n, log.With("component", "relay"), append(nodeServes(n), rpc.WithLimits(pub.limits())), bus.WithTopics(n), bus.WithForwarder(n), bus.WithStore(st), bus.WithMetrics(reg)); err != nil {
			return nil, fmt.Errorf("bus: %w", err)
		}
		localapi.Register(own.Server, n)
		srv = own
	}
	lb, err := lobby.New(n, st, lobby.WithLogger(log.With("component", "lobby")), lobby.WithMetrics(reg))
	if err != nil {
		if own != nil {
			_ = own.Close()
		}
		return nil, fmt.Errorf("lobby: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", srv.PublicHandler())
	mux.Handle("/lobby", lb)
	envelopes := agentProtocolGate(pub.Tokens != nil, localapi.NewAgentProtocol(n, log.With("component", "agentprotocol")))
	mux.Handle(localapi.AgentProtocolPath, envelopes)
	mux.Handle(localapi.AgentProtocolWSPath, envelopes)
	var h http.Handler = mux
	if pub.Tokens != nil {
		h = pub.Tokens.Middleware(mux)
	}
	l, err := new(net.ListenConfig).Listen(ctx, "tcp", pub.Addr)
	if err != nil {
		_ = lb.Close()
		if own != nil {
			_ = own.Close()
		}
		return nil, &ListenError{Listener: ListenerPublic, Addr: pub.Addr, Err: err}
	}
	scheme := "ws"
	if pub.TLS != nil {
		scheme = "wss"
		l = tls.NewListener(l, pub.TLS)
	}
	p := &publicListener{addr: l.Addr().String(), pub: pub, srv: srv, own: own, lobby: lb, done: make(chan error, 1), n: n, log: log, base: base,
		hs: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}}
	p.url = scheme + "://" + p.addr + "/"
	lb.Bridge(p)
	go func() { p.done <- p.hs.Serve(l) }()
	log.Info("relay serving", "ws", p.addr, "bus", p.url, "lobby", p.url+"lobby",
		"tokens", pub.Tokens != nil, "tls", pub.TLS != nil)
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
