package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/discovery/mdns"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/dht"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/pubsub"
	"github.com/meshagent/meshagent/sign"
)

// MDNSServiceName is the mDNS service meshagent nodes announce, so they do
// not mistake unrelated libp2p applications on the LAN for agents.
const MDNSServiceName = "_meshagent-discovery._udp"

// Per-peer hello budget.
const (
	helloRate  = 1.0 // per second
	helloBurst = 20
)

// Node is a running agent: a libp2p host plus meshagent's protocols. It is
// composed of parts, each with its own lock (see the package doc, Parts
// and their locks): the caller, the registry of services, the task table,
// the peer table, presence and the inbox of direct messages. Node.mu
// guards only the lifecycle.
type Node struct {
	cfg      Config
	log      *slog.Logger
	host     host.Host
	ownsHost bool
	signer   *sign.Signer
	id       peer.ID
	idStr    string
	replay   *sign.ReplayGuard
	limiter  *rateLimiters
	// helloLimiter bounds hellos per peer: a few at connect and on
	// capability changes are normal, a stream of them is not.
	helloLimiter *rateLimiters
	sem          chan struct{}
	// detached bounds the detached tasks running (maxDetachedRunning).
	detached chan struct{}
	// submittedMu serialises the updates of submitted tasks' records.
	submittedMu sync.Mutex

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	closeOnce sync.Once
	closeErr  error

	// mu guards closed, and with it every wg.Add after New: once closed
	// is set, no new goroutine is tracked.
	mu     sync.RWMutex
	closed bool

	services  *registry                      // capabilities offered, built-ins included
	caller    *caller                        // outbound request streams and pending calls
	inbound   inboundStreams                 // inbound request streams being served
	tasks     *taskTable                     // requests run as provider
	sent      sentTasks                      // providers of the requests sent
	peers     *peerTable                     // other agents' hellos
	presence  *presence                      // other agents' heartbeats, and SetBusy
	inbox     inbox                          // direct messages: handler and recent ids
	batches   msgBatcher                     // direct messages waiting to go out in batches
	audit     *auditLog                      // nil unless WithAudit
	outbox    *outbox                        // messages waiting for agents that are away (nil: no store)
	mailboxes *mailboxes                     // this agent's mailboxes, others', and a relay's service
	policy    atomic.Pointer[compiledPolicy] // requester policy (nil: none)
	guard     *guard                         // protects busy peers, trims idle inbound conns
	anyState  *anyProviders                  // CallAny's providers: in flight, unreachable, found
	recent    callRing                       // the last calls sent and served, for RecentCalls
	contexts  *beadContexts                  // shared bead contexts followed (seed 004)

	mdns   mdns.Service
	events event.Subscription
	dir    *dht.Directory // nil when the DHT is off
	topics *pubsub.Topics // nil when topics are off
}

// New builds and starts a node. It leaves nothing running if it fails.
func New(opts ...Option) (n *Node, err error) {
	cfg := DefaultConfig()
	if err := cfg.Apply(opts...); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	signer, err := sign.NewSigner(cfg.Identity)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	n = &Node{
		cfg:          cfg,
		log:          log.With("component", "node", "peer", signer.ID().String()),
		signer:       signer,
		id:           signer.ID(),
		idStr:        signer.ID().String(),
		replay:       sign.NewReplayGuard(cfg.Limits.ReplayWindow, 0),
		limiter:      newRateLimiters(cfg.Limits.RequestsPerSecond, cfg.Limits.Burst),
		helloLimiter: newRateLimiters(helloRate, helloBurst),
		sem:          make(chan struct{}, cfg.Limits.MaxConcurrent),
		detached:     make(chan struct{}, maxDetachedRunning),
		ctx:          ctx,
		cancel:       cancel,
		tasks:        newTaskTable(signer.ID().String(), cfg.Now),
		presence:     newPresence(),
		anyState:     newAnyProviders(cfg.Now),
		contexts:     newBeadContexts(cfg.Now, cfg.BeadResync),
	}
	n.services = newRegistry(n.builtins()...)
	n.tasks.log = n.log
	if cfg.Store != nil {
		n.tasks.st, n.tasks.ttl, n.tasks.bounds = cfg.Store, cfg.MessageTTL, cfg.TaskBounds
	}
	n.inbox.handler = cfg.MessageHandler
	defer func() {
		if err != nil {
			err = errors.Join(err, n.Close())
			n = nil
		}
	}()
	if err := n.services.set(cfg.Services); err != nil {
		return n, err
	}
	if cfg.Policy != nil {
		cp, err := compilePolicy(cfg.Policy)
		if err != nil {
			return n, err
		}
		n.policy.Store(cp)
	}
	if cfg.Host != nil {
		if cfg.Host.ID() != n.id {
			return n, errors.New("node: WithHost: host identity differs from WithIdentity")
		}
		n.host = cfg.Host
	} else {
		h, err := newHost(cfg)
		if err != nil {
			return n, err
		}
		n.host, n.ownsHost = h, true
	}
	n.peers = newPeerTable(func(p peer.ID) bool { return n.host.Network().Connectedness(p) == network.Connected })
	n.caller = &caller{
		host: n.host, open: n.openFrame, maxFrame: cfg.Limits.MaxFrameSize, ioTimeout: cfg.Limits.IOTimeout,
		log: n.log, done: ctx.Done(), conns: map[peer.ID]*reqConn{}, dialing: map[peer.ID]chan struct{}{},
	}
	n.guard = newGuard(n.host, cfg.Conns, n.log)
	n.guard.protectAddrs(tagRelay, cfg.StaticRelays)
	n.mailboxes = n.newMailboxes()
	if n.ownsHost {
		n.guard.watch()
		n.wg.Go(func() { n.guard.run(n.ctx) })
	}
	n.events, err = n.host.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted))
	if err != nil {
		return n, fmt.Errorf("node: subscribe to identify events: %w", err)
	}
	n.startAudit() // before the first request is served
	// The mailbox service before hellos, which register the agents that
	// name this relay, and before the outbox, whose first pass may hand
	// messages over to it (an agent that names this relay).
	if err := n.startMailboxes(); err != nil {
		return n, err
	}
	n.host.SetStreamHandler(protocol.HelloProtocol, n.handleHello)
	n.host.SetStreamHandler(protocol.RequestProtocol, n.handleRequestStream)
	n.wg.Go(n.identifyLoop)
	if cfg.Store != nil {
		again, escalated, err := n.tasks.sweepTasks(ctx, func(action string) bool {
			svc := n.services.lookup(action)
			return svc != nil && svc.admit == nil && svc.Capability.Idempotent
		})
		if err != nil {
			return n, err
		}
		for _, t := range again {
			n.reoffer(t)
		}
		for _, t := range escalated {
			n.resumeEscalated(t)
		}
		if err := n.startOutbox(); err != nil {
			return n, err
		}
	}
	if cfg.MDNS {
		n.mdns = mdns.NewMdnsService(n.host, MDNSServiceName, mdnsNotifee{n})
		if err := n.mdns.Start(); err != nil {
			return n, fmt.Errorf("node: start mDNS: %w", err)
		}
	}
	if n.ownsHost && len(cfg.StaticRelays) > 0 {
		// newHost checked the addresses already.
		relays, _ := peer.AddrInfosFromP2pAddrs(cfg.StaticRelays...)
		n.wg.Go(func() { n.observeThroughRelays(relays) })
	}
	var infos []peer.AddrInfo
	if len(cfg.Bootstrap) > 0 {
		infos, err = peer.AddrInfosFromP2pAddrs(cfg.Bootstrap...)
		if err != nil {
			return n, fmt.Errorf("node: bootstrap addresses must end in /p2p/<agent id>: %w", err)
		}
		n.wg.Go(func() { n.bootstrapLoop(infos) })
	}
	if cfg.DHT {
		opts := []dht.Option{dht.WithBootstrapPeers(infos...), dht.WithLogger(n.log.With("component", "dht"))}
		if cfg.Metrics != nil {
			opts = append(opts, dht.WithMetrics(cfg.Metrics.Registry))
		}
		opts = append(opts, cfg.DHTOptions...)
		if n.dir, err = dht.New(n.host, opts...); err != nil {
			return n, fmt.Errorf("node: %w", err)
		}
		if err := n.dir.Bootstrap(n.ctx); err != nil {
			return n, fmt.Errorf("node: %w", err)
		}
		n.dir.Advertise(n.Capabilities())
	}
	if cfg.Topics {
		if err := n.startTopics(); err != nil {
			return n, err
		}
	}
	if err := cfg.Metrics.Gauge("meshagent_peers_connected", "Peers this node holds a connection to.", func() float64 {
		return float64(len(n.host.Network().Peers()))
	}); err != nil {
		return n, fmt.Errorf("node: metrics: %w", err)
	}
	n.log.Info("node started", "addrs", n.Addrs(), "capabilities", n.capabilityNames())
	return n, nil
}

// ID returns the agent id as a peer ID.
func (n *Node) ID() peer.ID { return n.id }

// AgentID returns the agent id string (the peer ID).
func (n *Node) AgentID() string { return n.idStr }

// PublicKeyBase64 returns seed 002's form of the agent id.
func (n *Node) PublicKeyBase64() string { return n.signer.PublicKeyBase64() }

// Host returns the underlying libp2p host.
func (n *Node) Host() host.Host { return n.host }

// Signer returns the node's signer, for composing envelopes elsewhere.
func (n *Node) Signer() *sign.Signer { return n.signer }

// Addrs returns the node's listen addresses with its /p2p/ id appended,
// ready to pass to another node's bootstrap list.
func (n *Node) Addrs() []ma.Multiaddr {
	if n.host == nil {
		return nil
	}
	out, _ := peer.AddrInfoToP2pAddrs(&peer.AddrInfo{ID: n.id, Addrs: n.host.Addrs()})
	return out
}

// Close stops the node: it refuses new work, cancels in-flight calls and
// handlers, closes the host if it built it, and waits for its goroutines.
// It is idempotent; later calls return the first call's result.
func (n *Node) Close() error {
	n.closeOnce.Do(func() {
		n.mu.Lock()
		n.closed = true
		n.mu.Unlock()
		n.cancel()
		var errs []error
		if n.host != nil {
			n.host.RemoveStreamHandler(protocol.HelloProtocol)
			n.host.RemoveStreamHandler(protocol.RequestProtocol)
		}
		if n.mdns != nil {
			errs = append(errs, n.mdns.Close())
		}
		if n.events != nil {
			errs = append(errs, n.events.Close())
		}
		if n.caller != nil {
			n.caller.close(ErrClosed)
		}
		n.inbound.close()
		if n.mailboxes != nil && n.mailboxes.server != nil {
			errs = append(errs, n.mailboxes.server.Close())
		}
		if n.topics != nil {
			errs = append(errs, n.topics.Close())
		}
		if n.dir != nil {
			errs = append(errs, n.dir.Close())
		}
		if n.ownsHost && n.host != nil {
			errs = append(errs, n.host.Close())
		}
		n.wg.Wait()
		n.closeErr = errors.Join(errs...)
		n.log.Debug("node stopped")
	})
	return n.closeErr
}

// track registers one unit of work with the node's WaitGroup unless the
// node is closing. Every goroutine the node starts goes through it or wg.Go
// before New returns.
func (n *Node) track() bool {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.closed {
		return false
	}
	n.wg.Add(1)
	return true
}

// goTracked runs f on a tracked goroutine, or not at all after Close.
func (n *Node) goTracked(f func()) bool {
	if !n.track() {
		return false
	}
	go func() {
		defer n.wg.Done()
		f()
	}()
	return true
}
