package node

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/dht"
	"github.com/meshagent/meshagent/mailbox"
	"github.com/meshagent/meshagent/metrics"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/pubsub"
	"github.com/meshagent/meshagent/store"
)

// Limits bounds what a node accepts from other agents. Rate and size limits
// are keyed by the requester's agent id (the authenticated remote peer),
// and checked before any signature is verified.
type Limits struct {
	// MaxFrameSize is the largest frame read from a stream.
	MaxFrameSize int
	// MaxRequestBytes is the largest signed request envelope accepted.
	MaxRequestBytes int
	// RequestsPerSecond and Burst set each requester's token bucket
	// (default DefaultRequestsPerSecond, DefaultRequestBurst). Each
	// direct message of a batch counts as one request. RequestsPerSecond
	// <= 0 disables rate limiting.
	RequestsPerSecond float64
	Burst             int
	// MaxConcurrent bounds handlers running at once across all requesters.
	MaxConcurrent int
	// MaxPerStream bounds a single requester stream's in-flight handlers.
	MaxPerStream int
	// HandlerTimeout caps a handler's run time whatever the caller asks.
	HandlerTimeout time.Duration
	// IOTimeout bounds each frame write and the hello exchange. A frame
	// write that makes no progress fails after between half of it and all
	// of it: a stream's write deadline is extended only once half has gone.
	IOTimeout time.Duration
	// ReplayWindow is the accepted clock skew; ids are remembered this long.
	ReplayWindow time.Duration
}

// The default per-requester rate limit: high enough that a healthy pair
// of agents (seed 004: 10,000 messages a second) is never held back by
// it, low enough that one requester cannot flood a provider with work
// whose cost is checked only after it is admitted.
const (
	DefaultRequestsPerSecond = 20000
	DefaultRequestBurst      = 40000
)

// DefaultLimits returns the limits a node uses unless told otherwise.
func DefaultLimits() Limits {
	return Limits{
		MaxFrameSize:      protocol.DefaultMaxFrameSize,
		MaxRequestBytes:   protocol.DefaultMaxFrameSize,
		RequestsPerSecond: DefaultRequestsPerSecond,
		Burst:             DefaultRequestBurst,
		MaxConcurrent:     1024,
		MaxPerStream:      256,
		HandlerTimeout:    5 * time.Minute,
		IOTimeout:         10 * time.Second,
		ReplayWindow:      2 * time.Minute,
	}
}

func (l Limits) validate() error {
	switch {
	case l.MaxFrameSize < 1024:
		return fmt.Errorf("MaxFrameSize %d is below 1 KiB", l.MaxFrameSize)
	case l.MaxRequestBytes <= 0 || l.MaxRequestBytes > l.MaxFrameSize:
		return fmt.Errorf("MaxRequestBytes must be in (0, MaxFrameSize]")
	case l.RequestsPerSecond > 0 && l.Burst < 1:
		return errors.New("Burst must be at least 1 when rate limiting")
	case l.MaxConcurrent < 1 || l.MaxPerStream < 1:
		return errors.New("MaxConcurrent and MaxPerStream must be at least 1")
	case l.HandlerTimeout <= 0 || l.IOTimeout <= 0 || l.ReplayWindow <= 0:
		return errors.New("timeouts must be positive")
	}
	return nil
}

// Config is the full configuration of a node. Build it with options.
type Config struct {
	// Identity is the Ed25519 key; its peer ID is the agent id. Required.
	Identity crypto.PrivKey
	// ListenAddrs are the multiaddrs to listen on. Default: TCP and QUIC on
	// all IPv4 interfaces, random ports.
	ListenAddrs []ma.Multiaddr
	// Bootstrap are peers (with /p2p/ ids) dialled at start.
	Bootstrap []ma.Multiaddr
	// Name is the display name sent in hello.
	Name string
	// Services are the capabilities this agent offers, with handlers.
	Services []Service
	// MDNS enables local-network discovery. Default true.
	MDNS bool
	// RequestTimeout is a call's timeout when the caller gives none.
	// Default 30s.
	RequestTimeout time.Duration
	// Limits bound what the node accepts. Default DefaultLimits().
	Limits Limits
	// Conns bounds libp2p connections (resource manager limits and
	// connection manager watermarks). Default DefaultConnLimits(). Not
	// applied to a host given with WithHost.
	Conns ConnLimits
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger
	// Host, if set, is used instead of building one; the node does not
	// close it. Tests use it to inject hosts.
	Host host.Host
	// HostOptions are passed through to libp2p.New after meshagent's own.
	HostOptions []libp2p.Option
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// firstHeartbeatAtOnce sends the first heartbeat as presence starts
	// rather than after firstHeartbeat (tests that count heartbeats).
	firstHeartbeatAtOnce bool
	// DHT enables the capability directory (a private Kademlia DHT):
	// the node advertises its capabilities and can Discover others'.
	// Default true.
	DHT bool
	// DHTOptions are passed to dht.New (TTLs, kad-dht options).
	DHTOptions []dht.Option
	// Topics enables mesh-wide topics on GossipSub (Publish, Subscribe)
	// and presence. Default true.
	Topics bool
	// PubSubOptions are passed to pubsub.New (queue sizes, publish wait).
	PubSubOptions []pubsub.Option
	// Presence configures status heartbeats. Default DefaultPresence().
	Presence Presence
	// RelayService makes the node a libp2p circuit relay (v2) for others:
	// agents that cannot be dialled reserve a slot on it and are reached
	// through it. The relay command turns it on.
	RelayService bool
	// StaticRelays are circuit relays (with /p2p/ ids) this node reserves
	// a slot on, so that peers that cannot dial it directly reach it
	// through them. The node then treats itself as unreachable directly
	// and advertises its /p2p-circuit addresses.
	StaticRelays []ma.Multiaddr
	// Policy limits requesters by agent or group (see Policy); nil: none.
	Policy *Policy
	// Store keeps the outbox of messages to agents that are away and the
	// dead letters of direct messages (SendMessage, Forward); the caller
	// owns it. Optional: without one a message to an agent that is away
	// fails after its attempts.
	Store *store.Store
	// Audit, when set, makes the node keep an audit log in Store (see
	// WithAudit); true records params too.
	Audit *bool
	// MessageTTL is how long a message waits in the outbox for its agent
	// before it is dead-lettered. Default DefaultMessageTTL (seven days).
	MessageTTL time.Duration
	// OutboxBounds bound the outbox: messages per agent and bytes in all
	// (payloads and metadata). Past them a send fails with ErrOutboxFull.
	// Default DefaultOutboxPerRecipient and DefaultOutboxBytes.
	OutboxBounds store.Bounds
	// TaskBounds bound the tasks recorded in Store (requests taken from a
	// mailbox, detached submissions): per requester, in all, in bytes;
	// zero fields take the store's defaults (store.DefaultTasksPerRequester,
	// store.DefaultMaxTasks, store.DefaultMaxTaskBytes). A requester at
	// its share has its oldest finished record forgotten to make room (see
	// store.Store.AddTask); a request past the bounds otherwise is refused,
	// RATE_LIMITED, before it runs.
	TaskBounds store.TaskBounds
	// OutboxRetry is the longest wait between two attempts at an agent
	// that is away (a hello or heartbeat from it wakes the outbox at
	// once). Default DefaultOutboxRetry.
	OutboxRetry time.Duration
	// Metrics records calls served and sent and refusals, the topic
	// router's and the directory's figures, and go-libp2p's resource
	// manager's. Nil: none.
	Metrics *metrics.Metrics
	// MessageBackoff is SendMessage's first wait between attempts; it
	// doubles. Default 500 ms.
	MessageBackoff time.Duration
	// BeadResync is how often every followed bead context catches up
	// again from history keepers (anti-entropy). Default 10 s.
	BeadResync time.Duration
	// Mailboxes are this agent's mailbox relays (ending in /p2p/<relay
	// id>), at most protocol.MaxMailboxes: announced in hello, so that a
	// sender that cannot reach the agent deposits its messages there, and
	// fetched from whenever the node connects to one.
	Mailboxes []ma.Multiaddr
	// MailboxService makes the node a mailbox relay for other agents
	// (package mailbox), keeping their messages in Store, configured by
	// MailboxOptions. The relay command turns it on.
	MailboxService bool
	MailboxOptions []mailbox.Option
	// MessageHandler handles direct messages from the start (OnMessage
	// sets it later): messages fetched from a mailbox as the node starts
	// find it in place.
	MessageHandler MessageHandler
	// KeepHistory are the topic patterns whose messages this node keeps
	// in Store, as received, for others' durable subscriptions to fetch
	// ("*": every family a connected peer subscribes to). Needs Store;
	// the store bounds what is kept (store.WithKeptRetention,
	// store.WithMaxKeptBytes).
	KeepHistory []string
	// AgentCard answers the a2a.card built-in with this node's signed A2A
	// Agent Card (the a2a package's OwnCard). Nil: the node does not serve
	// it.
	AgentCard CardFunc
}

// Presence configures the status heartbeats of seed 004's registry. A
// peer whose heartbeats stop is shown as stale after StaleAfter of its own
// (announced) intervals and dropped from Peers after DropAfter of them, unless it is
// still connected.
type Presence struct {
	// Interval between heartbeats, in a mesh of up to 10 agents; in a
	// larger one the node stretches it in proportion (see Presence in
	// the package doc). 0 turns heartbeats off (the node still tracks
	// others').
	Interval time.Duration
	// PersonaType is this agent's persona type (seed 004, e.g.
	// "qa-engineer"), announced in heartbeats and matched by broadcast
	// filters.
	PersonaType string
}

// Staleness of heartbeats, in multiples of the sender's interval.
const (
	StaleAfter = 3
	DropAfter  = 10
)

// Bounds of a heartbeat interval, ours or a peer's.
const (
	MinHeartbeatInterval = 50 * time.Millisecond
	MaxHeartbeatInterval = 10 * time.Minute
)

// DefaultPresence returns the default heartbeat settings.
func DefaultPresence() Presence { return Presence{Interval: 10 * time.Second} }

// Option configures a node.
type Option func(*Config) error

// DefaultConfig returns every default in one place.
func DefaultConfig() Config {
	return Config{
		MDNS:           true,
		DHT:            true,
		Topics:         true,
		Presence:       DefaultPresence(),
		MessageBackoff: 500 * time.Millisecond,
		BeadResync:     DefaultBeadResync,
		MessageTTL:     DefaultMessageTTL,
		OutboxBounds:   store.Bounds{PerRecipient: DefaultOutboxPerRecipient, Bytes: DefaultOutboxBytes},
		OutboxRetry:    DefaultOutboxRetry,
		RequestTimeout: 30 * time.Second,
		Limits:         DefaultLimits(),
		Conns:          DefaultConnLimits(),
		Now:            time.Now,
	}
}

// Apply applies opts in order, skipping nil ones.
func (c *Config) Apply(opts ...Option) error {
	for i, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return fmt.Errorf("node: option %d: %w", i, err)
		}
	}
	return nil
}

// Validate checks cross-field rules after Apply.
func (c *Config) Validate() error {
	if c.Identity == nil {
		return ErrNoIdentity
	}
	if c.Identity.Type() != crypto.Ed25519 {
		return fmt.Errorf("node: identity must be Ed25519, got %s", c.Identity.Type())
	}
	if len(c.Name) > protocol.MaxNameLen {
		return fmt.Errorf("node: name longer than %d bytes", protocol.MaxNameLen)
	}
	if c.RequestTimeout <= 0 {
		return errors.New("node: request timeout must be positive")
	}
	if c.MessageTTL <= 0 || c.OutboxRetry <= 0 {
		return errors.New("node: message TTL and outbox retry must be positive")
	}
	if c.OutboxBounds.PerRecipient <= 0 || c.OutboxBounds.Bytes <= 0 {
		return errors.New("node: outbox bounds must be positive")
	}
	if err := c.Limits.validate(); err != nil {
		return fmt.Errorf("node: limits: %w", err)
	}
	if err := c.Conns.validate(); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	if c.Presence.Interval != 0 && (c.Presence.Interval < MinHeartbeatInterval || c.Presence.Interval > MaxHeartbeatInterval) {
		return fmt.Errorf("node: heartbeat interval %v outside [%v, %v]", c.Presence.Interval, MinHeartbeatInterval, MaxHeartbeatInterval)
	}
	if err := validateMailboxes(c.Mailboxes); err != nil {
		return err
	}
	if c.Audit != nil && c.Store == nil {
		return errors.New("node: an audit log needs a store (WithStore)")
	}
	if c.MailboxService && c.Store == nil {
		return errors.New("node: a mailbox service needs a store (WithStore)")
	}
	if c.Presence.Interval != 0 && !c.Topics {
		return errors.New("node: heartbeats need topics (WithTopics(true)) or a zero interval")
	}
	if len(c.KeepHistory) > 0 && (c.Store == nil || !c.Topics) {
		return errors.New("node: keeping topic history needs a store (WithStore) and topics")
	}
	return validateServices(c.Services)
}

// WithIdentity sets the agent's Ed25519 key.
func WithIdentity(k crypto.PrivKey) Option {
	return func(c *Config) error { c.Identity = k; return nil }
}

// WithListenAddrs sets the listen multiaddrs.
func WithListenAddrs(addrs ...ma.Multiaddr) Option {
	return func(c *Config) error { c.ListenAddrs = append(c.ListenAddrs, addrs...); return nil }
}

// WithBootstrap adds peers to dial at start; each must end in /p2p/<id>.
func WithBootstrap(addrs ...ma.Multiaddr) Option {
	return func(c *Config) error { c.Bootstrap = append(c.Bootstrap, addrs...); return nil }
}

// WithAgentCard makes the node answer the a2a.card built-in through f.
func WithAgentCard(f CardFunc) Option {
	return func(c *Config) error { c.AgentCard = f; return nil }
}

// WithName sets the display name announced in hello.
func WithName(name string) Option {
	return func(c *Config) error { c.Name = name; return nil }
}

// WithServices adds capabilities with their handlers.
func WithServices(s ...Service) Option {
	return func(c *Config) error { c.Services = append(c.Services, s...); return nil }
}

// WithMDNS turns local-network discovery on or off.
func WithMDNS(on bool) Option {
	return func(c *Config) error { c.MDNS = on; return nil }
}

// WithRequestTimeout sets the default call timeout.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *Config) error { c.RequestTimeout = d; return nil }
}

// WithLimits replaces the limits.
func WithLimits(l Limits) Option {
	return func(c *Config) error { c.Limits = l; return nil }
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option {
	return func(c *Config) error { c.Logger = l; return nil }
}

// WithHost uses a prebuilt host, which the node will not close.
func WithHost(h host.Host) Option {
	return func(c *Config) error { c.Host = h; return nil }
}

// WithHostOptions passes extra options to libp2p.New (an escape hatch).
func WithHostOptions(opts ...libp2p.Option) Option {
	return func(c *Config) error { c.HostOptions = append(c.HostOptions, opts...); return nil }
}

// WithDHT turns the capability directory on or off.
func WithDHT(on bool) Option {
	return func(c *Config) error { c.DHT = on; return nil }
}

// WithDHTOptions passes options to the capability directory (dht.New).
func WithDHTOptions(opts ...dht.Option) Option {
	return func(c *Config) error { c.DHTOptions = append(c.DHTOptions, opts...); return nil }
}

// WithClock sets the clock used for timestamps and the replay window.
func WithClock(now func() time.Time) Option {
	return func(c *Config) error { c.Now = now; return nil }
}

// WithTopics turns mesh-wide topics (and with them presence) on or off.
func WithTopics(on bool) Option {
	return func(c *Config) error { c.Topics = on; return nil }
}

// WithPubSubOptions passes options to the topic router (pubsub.New).
func WithPubSubOptions(opts ...pubsub.Option) Option {
	return func(c *Config) error { c.PubSubOptions = append(c.PubSubOptions, opts...); return nil }
}

// WithPresence sets the heartbeat interval and persona type.
func WithPresence(p Presence) Option {
	return func(c *Config) error { c.Presence = p; return nil }
}

// WithRelayService makes the node a circuit relay for other agents.
func WithRelayService(on bool) Option {
	return func(c *Config) error { c.RelayService = on; return nil }
}

// WithStaticRelays adds circuit relays (ending in /p2p/<id>) to reserve a
// slot on.
func WithStaticRelays(addrs ...ma.Multiaddr) Option {
	return func(c *Config) error { c.StaticRelays = append(c.StaticRelays, addrs...); return nil }
}

// WithPolicy sets the requester policy; Node.SetPolicy changes it later.
func WithPolicy(p *Policy) Option {
	return func(c *Config) error { c.Policy = p; return nil }
}

// WithMetrics records the node's calls and refusals, its topic
// messages, its DHT lookups and go-libp2p's resource manager in m.
func WithMetrics(m *metrics.Metrics) Option {
	return func(c *Config) error { c.Metrics = m; return nil }
}

// WithTaskBounds sets Config.TaskBounds.
func WithTaskBounds(b store.TaskBounds) Option {
	return func(c *Config) error {
		if b.PerRequester < 0 || b.Total < 0 || b.Bytes < 0 {
			return errors.New("node: task bounds must not be negative")
		}
		c.TaskBounds = b
		return nil
	}
}

// WithStore gives the node a store for its outbox (messages to agents
// that are away) and the dead letters of direct messages.
func WithStore(st *store.Store) Option {
	return func(c *Config) error { c.Store = st; return nil }
}

// WithKeepHistory makes the node a history keeper of the topics matching
// patterns (see Config.KeepHistory). It needs WithStore.
func WithKeepHistory(patterns ...string) Option {
	return func(c *Config) error { c.KeepHistory = append(c.KeepHistory, patterns...); return nil }
}

// WithBeadResync sets how often followed bead contexts catch up again
// from history keepers (Config.BeadResync).
func WithBeadResync(d time.Duration) Option {
	return func(c *Config) error {
		if d <= 0 {
			return errors.New("bead context resync interval must be positive")
		}
		c.BeadResync = d
		return nil
	}
}

// WithMessageBackoff sets SendMessage's first wait between attempts.
func WithMessageBackoff(d time.Duration) Option {
	return func(c *Config) error {
		if d <= 0 {
			return errors.New("message backoff must be positive")
		}
		c.MessageBackoff = d
		return nil
	}
}

// WithMessageTTL sets how long a message waits in the outbox for its agent
// before it is dead-lettered.
func WithMessageTTL(d time.Duration) Option {
	return func(c *Config) error {
		if d <= 0 {
			return errors.New("message TTL must be positive")
		}
		c.MessageTTL = d
		return nil
	}
}

// WithOutboxBounds bounds the outbox: messages per agent and bytes in all.
func WithOutboxBounds(perRecipient int, bytes int64) Option {
	return func(c *Config) error {
		if perRecipient <= 0 || bytes <= 0 {
			return errors.New("outbox bounds must be positive")
		}
		c.OutboxBounds = store.Bounds{PerRecipient: perRecipient, Bytes: bytes}
		return nil
	}
}

// WithOutboxRetry sets the longest wait between two attempts at an agent
// that is away.
func WithOutboxRetry(d time.Duration) Option {
	return func(c *Config) error {
		if d <= 0 {
			return errors.New("outbox retry must be positive")
		}
		c.OutboxRetry = d
		return nil
	}
}

// WithMailboxes names this agent's mailbox relays (each ending in
// /p2p/<relay id>).
func WithMailboxes(addrs ...ma.Multiaddr) Option {
	return func(c *Config) error { c.Mailboxes = append(c.Mailboxes, addrs...); return nil }
}

// WithMailboxService makes the node a mailbox relay for other agents; it
// needs a store (WithStore).
func WithMailboxService(opts ...mailbox.Option) Option {
	return func(c *Config) error {
		c.MailboxService = true
		c.MailboxOptions = append(c.MailboxOptions, opts...)
		return nil
	}
}

// WithMessageHandler sets the handler of direct messages from the start.
func WithMessageHandler(h MessageHandler) Option {
	return func(c *Config) error { c.MessageHandler = h; return nil }
}
