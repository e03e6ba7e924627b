package pubsub

import (
	"fmt"
	"time"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/discovery"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshagent/meshagent/sign"
)

// DefaultMaxMessageSize bounds a GossipSub message (signature and body).
const DefaultMaxMessageSize = 1 << 20

// Defaults of New's other options.
const (
	// DefaultPublishWait is how long Publish waits for receivers.
	DefaultPublishWait = 5 * time.Second
	// DefaultMinPeers is how many receivers Publish waits for.
	DefaultMinPeers = 1
	// DefaultQueueSize is each subscription's queue length.
	DefaultQueueSize = 256
)

// config is a Topics' configuration. New builds it in three steps, as
// kad-dht does: defaultConfig, then apply the options in order (they only
// set fields), then validate, which checks the whole, so every check is in
// one place. The options of one Publish (PublishOption) sit next to
// Publish.
type config struct {
	maxSize   int
	wait      time.Duration
	minPeers  int
	queue     int
	self      *Self               // nil: the signer's id alone
	guard     *sign.ReplayGuard   // nil: a fresh one
	disc      discovery.Discovery // nil: connected peers only
	archive   Archive             // nil: not a history keeper
	keep      []string            // patterns kept; "*": every family peers use
	pos       Positions           // nil: no durable subscriptions
	fetchWait time.Duration
	reg       prometheus.Registerer // nil: no metrics
	tracers   []libp2ppubsub.RawTracer
	// unprotected are families whose GossipSub mesh peers the connection
	// manager may trim (WithUnprotectedFamilies).
	unprotected []string
}

func defaultConfig() config {
	return config{maxSize: DefaultMaxMessageSize, wait: DefaultPublishWait, minPeers: DefaultMinPeers, queue: DefaultQueueSize, fetchWait: DefaultPublishWait}
}

// apply applies opts in order, skipping nil ones.
func (c *config) apply(opts ...Option) error {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}

// validate checks the configuration as a whole.
func (c *config) validate() error {
	var bad string
	switch {
	case c.maxSize <= sign.SignatureSize:
		bad = fmt.Sprintf("max message size %d leaves no room for a message", c.maxSize)
	case c.wait < 0:
		bad = fmt.Sprintf("publish wait %v is negative", c.wait)
	case c.minPeers < 0:
		bad = fmt.Sprintf("min peers %d is negative", c.minPeers)
	case c.queue < 1:
		bad = fmt.Sprintf("queue size %d is below 1", c.queue)
	case c.fetchWait < 0:
		bad = fmt.Sprintf("history fetch wait %v is negative", c.fetchWait)
	case len(c.keep) > 0 && c.archive == nil:
		bad = "patterns to keep but no archive"
	default:
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidConfig, bad)
}

// Option configures New.
type Option func(*config) error

// WithMaxMessageSize sets the largest message accepted or sent. The
// default is DefaultMaxMessageSize.
func WithMaxMessageSize(n int) Option { return func(c *config) error { c.maxSize = n; return nil } }

// WithPublishWait sets how long Publish waits for topic peers. The
// default is DefaultPublishWait.
func WithPublishWait(d time.Duration) Option { return func(c *config) error { c.wait = d; return nil } }

// WithMinPeers sets how many topic peers Publish waits for. The default is
// DefaultMinPeers.
func WithMinPeers(n int) Option { return func(c *config) error { c.minPeers = n; return nil } }

// WithQueueSize sets the per-subscription queue length: at most n
// messages wait for a subscription's handler, and more are dropped
// (Subscription.Dropped counts them). The queue's buffer grows on demand
// and is released when it drains, so n bounds a busy subscription's
// memory, not an idle one's. The default is DefaultQueueSize.
func WithQueueSize(n int) Option { return func(c *config) error { c.queue = n; return nil } }

// WithUnprotectedFamilies lets the connection manager trim the GossipSub
// mesh peers of these families' topics, which GossipSub otherwise
// protects for as long as they are in a topic's mesh (every topic's, so
// a node in two topics can hold up to twice GossipSub's D_hi peers, 12,
// that no trim may close). For a best-effort family every agent is in,
// such as presence: when a trim closes one of its mesh peers, GossipSub
// grafts another connected subscriber at its next heartbeat, and the
// mesh peers of the other families stay protected.
func WithUnprotectedFamilies(families ...string) Option {
	return func(c *config) error { c.unprotected = append(c.unprotected, families...); return nil }
}

// WithSelf describes the local agent; without it filters are checked
// against the signer's id only. SetSelf changes it later.
func WithSelf(s Self) Option { return func(c *config) error { c.self = &s; return nil } }

// WithDiscovery finds topic peers through d (for example the capability
// directory's TopicDiscovery): subscribers advertise their families, keep looking
// for more subscribers while their mesh is thin, and Publish looks up
// subscribers when a family has no known peer. Without it only peers that
// are already connected are found.
func WithDiscovery(d discovery.Discovery) Option {
	return func(c *config) error { c.disc = d; return nil }
}

// WithArchive makes the node a history keeper: it keeps the signed
// messages of the topics matching patterns in a (as received, so that a
// fetcher verifies them end to end) and answers history queries over
// protocol.StoreProtocol. The pattern "*" keeps every family a connected
// peer subscribes to (the presence family excepted, at most
// MaxKeptFamilies). Each pattern's family must be literal, as for
// Subscribe. a bounds what it keeps (age and size).
func WithArchive(a Archive, patterns ...string) Option {
	return func(c *config) error {
		c.archive = a
		c.keep = append(c.keep, patterns...)
		return nil
	}
}

// WithPositions lets the node run durable subscriptions
// (SubscribeDurable), remembering their positions in p.
func WithPositions(p Positions) Option {
	return func(c *config) error { c.pos = p; return nil }
}

// WithFetchWait sets how long a history fetch waits for a keeper to
// appear when none is connected (default DefaultPublishWait).
func WithFetchWait(d time.Duration) Option {
	return func(c *config) error { c.fetchWait = d; return nil }
}

// WithMetrics records topic messages published, delivered to local
// subscriptions, dropped and rejected (meshagent_topic_messages_…_total,
// by topic family) in reg. One router per registry.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(c *config) error { c.reg = reg; return nil }
}

// WithRawTracer adds a GossipSub raw tracer, which sees every RPC the
// router sends and receives (the scale harness splits the traffic by kind
// and topic with one). Its methods run on the router's event loop and
// must not block.
func WithRawTracer(t libp2ppubsub.RawTracer) Option {
	return func(c *config) error { c.tracers = append(c.tracers, t); return nil }
}
