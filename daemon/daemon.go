package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/metrics"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// Daemon is a running process's parts: the store, the node, the local
// API, a relay's public listener, the metrics listener, seed 002's file
// exchange, the settings files' watch and systemd's notifications. Start
// builds it; Close stops all it started.
type Daemon struct {
	cfg      Config
	node     *node.Node
	ownNode  bool
	store    *store.Store
	ownStore bool
	api      *apiServer      // nil without Config.API
	ws       *publicListener // nil without Config.Public.Addr
	ops      *opsServer      // nil without Config.MetricsAddr
	exchange *localapi.Exchange
	svc      *serviceNotifier

	reloadMu sync.Mutex     // one reload at a time, each file's digest with it
	files    []*watchedFile // the configured settings files
	cancel   context.CancelFunc
	wg       sync.WaitGroup // loop

	closeOnce sync.Once
	closed    chan struct{} // closed when Close's stopping has finished
	closeErr  error
}

// watchedFile is a settings file the daemon reloads when it changes.
type watchedFile struct {
	path   string
	digest string
	reload func()
}

// Start builds and starts every part opts configure and returns once
// they serve; ctx bounds the binding of the listeners. On an error what
// was started is stopped again.
func Start(ctx context.Context, opts ...Option) (*Daemon, error) {
	cfg := DefaultConfig()
	if err := cfg.Apply(opts...); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Level == nil {
		cfg.Level = new(slog.LevelVar)
	}
	d := &Daemon{cfg: cfg, node: cfg.Node, store: cfg.Store}
	if err := d.start(ctx); err != nil {
		return nil, errors.Join(err, d.stop(context.Background()))
	}
	return d, nil
}

func (d *Daemon) start(ctx context.Context) error {
	cfg, log := d.cfg, d.cfg.Logger
	reg := metrics.New()
	if d.store == nil && cfg.DataDir != "" {
		st, err := store.Open(filepath.Join(cfg.DataDir, StoreFileName), store.WithLogger(log.With("component", "store")),
			store.WithKeptRetention(cfg.KeepAge), store.WithMaxKeptBytes(cfg.KeepBytes), store.WithMetrics(reg.Registry),
			store.WithReserve(storeReserve))
		if err != nil {
			return &StoreError{Dir: cfg.DataDir, Err: err}
		}
		d.store, d.ownStore = st, true
	}
	if d.node == nil {
		opts := slices.Concat(cfg.NodeOptions, []node.Option{node.WithMetrics(reg), node.WithStore(d.store), node.WithLogger(log),
			node.WithBootstrap(cfg.Bootstrap...), node.WithServices(cfg.Services...)})
		if cfg.HoldMessages {
			// From the start: messages fetched from a mailbox as the node
			// starts wait for the agent too.
			opts = append(opts, node.WithMessageHandler(holdMessages))
		}
		n, err := node.New(opts...)
		if err != nil {
			return fmt.Errorf("start node: %w", err)
		}
		d.node, d.ownNode = n, true
	}
	n := d.node
	if cfg.Node != nil && cfg.HoldMessages {
		n.OnMessage(holdMessages)
	}
	ops := metrics.Handler(reg, readyChecks(n, d.store, cfg.Bootstrap))
	lim := cfg.Public.limits()
	// What the bus server admits, beside meshagent_bus_clients.
	if err := reg.Registry.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "meshagent_bus_max_clients",
		Help: "The most WebSocket clients the bus server holds (--max-clients)."}, func() float64 { return float64(lim.MaxClients) })); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	var srv *BusServer
	if cfg.API != "" {
		seed003 := localapi.NewSeed003(n, localapi.WithTokens(cfg.AgentTokens), localapi.WithRequestsPerMinute(cfg.AgentRate),
			localapi.WithSeed003Logger(log.With("component", "seed003")))
		a, err := startAPI(n, cfg.API, log, d.store, reg.Registry, cfg.Level, append(statusPage(ops, n, log, seed003), rpc.WithLimits(lim))...)
		if err != nil {
			return err
		}
		d.api, srv = a, a.srv
		if err := reg.Gauge("meshagent_bus_clients", "WebSocket clients connected to the local API and bus.", func() float64 {
			return float64(srv.Clients())
		}); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	if cfg.Public.Addr != "" {
		ws, err := startPublicListener(ctx, n, srv, cfg.Public, log, d.store, cfg.Services, reg.Registry)
		if err != nil {
			return err
		}
		d.ws = ws
	}
	if cfg.MetricsAddr != "" {
		o, err := startOps(ctx, cfg.MetricsAddr, ops, log)
		if err != nil {
			return err
		}
		d.ops = o
	}
	if cfg.ExchangeDir != "" {
		xlog := log.With("component", "exchange")
		x, err := localapi.StartExchange(localapi.NewAgentProtocol(n, xlog), cfg.ExchangeDir, n.AgentID(), n.PublicKeyBase64(), xlog)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrExchange, err)
		}
		d.exchange = x
	}
	d.startLoops()
	return nil
}

// startLoops tells systemd (when it runs the process) that the node
// serves, and starts loop for the settings files and the watchdog.
func (d *Daemon) startLoops() {
	cfg, log := d.cfg, d.cfg.Logger
	for _, f := range []*watchedFile{
		{path: cfg.CapabilitiesFile, reload: d.ReloadCapabilities},
		{path: cfg.PolicyFile, reload: d.ReloadPolicy},
		{path: cfg.Public.TokensFile, reload: d.ReloadTokens},
		{path: cfg.AgentTokensFile, reload: d.ReloadAgentTokens},
	} {
		if f.path != "" {
			f.digest = fileDigest(f.path)
			d.files = append(d.files, f)
		}
	}
	// Under systemd (Type=notify) the node is ready now.
	d.svc = newServiceNotifier(log)
	d.svc.ready("serving as " + d.node.AgentID())
	poll, watchdog := cfg.Poll, d.svc.watchdogEvery()
	if len(d.files) == 0 {
		poll = 0
	}
	if poll > 0 || watchdog > 0 {
		ctx, cancel := context.WithCancel(context.Background())
		d.cancel = cancel
		d.wg.Go(func() { d.loop(ctx, poll, watchdog) })
	}
}

// loop checks the settings files every poll and answers systemd's
// watchdog every watchdog (each 0: not at all) until ctx ends. One loop
// does both, so a reload that wedges stops the watchdog's answers too
// and systemd restarts the process.
func (d *Daemon) loop(ctx context.Context, poll, watchdog time.Duration) {
	var pollC, watchdogC <-chan time.Time
	if poll > 0 {
		t := time.NewTicker(poll)
		defer t.Stop()
		pollC = t.C
	}
	if watchdog > 0 {
		d.svc.alive()
		t := time.NewTicker(watchdog)
		defer t.Stop()
		watchdogC = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-watchdogC:
			d.svc.alive()
		case <-pollC:
			d.reloadChanged()
		}
	}
}

// reloadChanged reloads each settings file whose content changed. A file
// being rewritten may be caught half-written; it then fails to load, the
// current settings stay, and the next check sees the finished file.
func (d *Daemon) reloadChanged() {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	for _, f := range d.files {
		if dg := fileDigest(f.path); dg != f.digest {
			f.digest = dg
			f.reload()
		}
	}
}

// Reload reads every configured settings file again (capabilities,
// policy, tokens, agent tokens), changed or not, and reports whether
// there was any. A file that does not load is logged and leaves the
// current settings in place.
func (d *Daemon) Reload() bool {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	for _, f := range d.files {
		f.digest = fileDigest(f.path)
		f.reload()
	}
	return len(d.files) > 0
}

// fileDigest returns the SHA-256 of a file's content, or "" if it cannot
// be read (a missing file is a change too once it comes back).
func fileDigest(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return string(sum[:])
}

// ReloadCapabilities replaces the node's capabilities with
// Config.CapabilitiesFile's (on a relay, beside its lobby agents'). A file
// that does not load leaves the current set in place.
func (d *Daemon) ReloadCapabilities() {
	path, log := d.cfg.CapabilitiesFile, d.cfg.Logger
	services, err := node.LoadServices(path, d.cfg.ParseOptions...)
	if err == nil {
		if d.ws != nil {
			err = d.ws.setBase(services)
		} else {
			err = d.node.SetServices(services)
		}
	}
	if err != nil {
		log.Error("capabilities not reloaded; keeping the current set", "path", path, "err", err)
		return
	}
	log.Info("capabilities reloaded", "path", path, "count", len(services))
}

// ReloadPolicy replaces the node's requester policy with
// Config.PolicyFile's. A file that does not load leaves the current
// policy in place.
func (d *Daemon) ReloadPolicy() {
	path, log := d.cfg.PolicyFile, d.cfg.Logger
	p, err := node.LoadPolicy(path)
	if err == nil {
		err = d.node.SetPolicy(p)
	}
	if err != nil {
		log.Error("policy not reloaded; keeping the current one", "path", path, "err", err)
		return
	}
	log.Info("policy reloaded", "path", path)
}

// ReloadTokens re-reads the public listener's tokens file and closes the
// connections of tokens it no longer lists. A file that does not load
// leaves the current tokens in place.
func (d *Daemon) ReloadTokens() {
	p, log := d.cfg.Public, d.cfg.Logger
	if err := p.Tokens.Reload(p.TokensFile); err != nil {
		log.Error("tokens not reloaded; keeping the current ones", "path", p.TokensFile, "err", err)
		return
	}
	dropped := d.ws.srv.DropRevoked()
	log.Info("tokens reloaded", "path", p.TokensFile, "count", p.Tokens.Len(), "revoked_connections", dropped)
}

// ReloadAgentTokens re-reads seed 003's tokens file; one that does not
// load leaves the current tokens in place.
func (d *Daemon) ReloadAgentTokens() {
	t, path, log := d.cfg.AgentTokens, d.cfg.AgentTokensFile, d.cfg.Logger
	if err := t.Reload(path); err != nil {
		log.Error("agent tokens not reloaded; keeping the current ones", "path", path, "err", err)
		return
	}
	log.Info("agent tokens reloaded", "path", path, "count", t.Len())
}

// Node returns the node served.
func (d *Daemon) Node() *node.Node { return d.node }

// APIAddr returns the local API's bound host:port, or "" without one.
func (d *Daemon) APIAddr() string {
	if d.api == nil {
		return ""
	}
	return d.api.addr
}

// PublicAddr returns the relay's public listener's bound host:port, or ""
// without one.
func (d *Daemon) PublicAddr() string {
	if d.ws == nil {
		return ""
	}
	return d.ws.addr
}

// Close tells systemd the process stops, then stops, in order, the loop,
// the file exchange, the listeners (metrics, public, local API: front
// doors first), the node and the store (each only if the daemon built
// it). It returns when all have stopped, or with ctx's error when ctx
// ends first (the closing goes on). Closing again waits for the first
// closing and returns its result.
func (d *Daemon) Close(ctx context.Context) error {
	d.closeOnce.Do(func() {
		d.svc.stopping()
		d.closed = make(chan struct{})
		go func() {
			d.closeErr = d.stop(ctx)
			close(d.closed)
		}()
	})
	select {
	case <-d.closed:
		return d.closeErr
	case <-ctx.Done():
		return fmt.Errorf("daemon: close: %w", ctx.Err())
	}
}

// stop stops what was started, in Close's order.
func (d *Daemon) stop(ctx context.Context) error {
	if d.cancel != nil {
		d.cancel()
		d.wg.Wait()
	}
	var errs []error
	if d.exchange != nil {
		errs = append(errs, d.exchange.Close())
	}
	if d.ops != nil {
		errs = append(errs, d.ops.close(ctx))
	}
	if d.ws != nil {
		errs = append(errs, d.ws.close(ctx))
	}
	if d.api != nil {
		errs = append(errs, d.api.close(ctx))
	}
	if d.ownNode {
		errs = append(errs, d.node.Close())
	}
	if d.ownStore {
		errs = append(errs, d.store.Close())
	}
	return errors.Join(errs...)
}
