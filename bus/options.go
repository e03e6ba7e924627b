package bus

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// Config configures a Bus. Start from DefaultConfig; New applies the
// options and validates the result.
type Config struct {
	// DefaultPropagation applies to subscriptions that name no policy.
	DefaultPropagation Propagation
	// MaxAttempts is how many deliveries are tried before a message goes
	// to the dead-letter queue (seed 001's diagram: 3). Only deliveries
	// count: a retry that finds its subscriber away (its client id not
	// subscribed to a matching pattern, or its connection gone during the
	// attempt) waits for it instead, up to MessageTTL.
	MaxAttempts int
	// MessageTTL bounds how long an acknowledged message waits in the
	// outbox for its subscriber, from when it was sent; past it the
	// message is a dead letter that says so (seed 004: 7 days).
	MessageTTL time.Duration
	// RetryBackoff is the first wait before a retry when the subscriber
	// gives no retry_seconds; it doubles per attempt up to MaxBackoff.
	RetryBackoff time.Duration
	// MaxBackoff bounds the wait before a retry, retry_seconds included.
	MaxBackoff time.Duration
	// DeliveryTimeout bounds one processMessage call, and one call of a
	// mesh agent for an agent:<id> topic.
	DeliveryTimeout time.Duration
	// MeshWait bounds how long sendMessage waits for mesh topic peers.
	MeshWait time.Duration
	// Topics carries the bus's topics across the mesh: what a client
	// sends is published there too, and each pattern a client subscribes
	// to is subscribed there once, so that messages published elsewhere
	// reach it. nil (the default): the bus's topics are local to it.
	Topics rpc.IDPublisher
	// Forwarder queues a message for an agent that is away (a call that
	// fails with UNKNOWN_AGENT or CAPABILITY_NOT_SUPPORTED) in the mesh's
	// store-and-forward outbox, and the ack says it was queued. nil (the
	// default): such a message is refused in its ack.
	Forwarder Forwarder
	// Store persists the outbox, dead letters and history. Without one a
	// failed delivery is reported in its ack and not retried, and
	// bus.history, bus.deadLetters and bus.replay are not served. The
	// caller keeps ownership: close it after the bus.
	Store *store.Store
	// Logger receives structured logs. Default: slog.Default().
	Logger *slog.Logger
	// Now is the clock that stamps messages and schedules retries.
	// Default: time.Now.
	Now func() time.Time
	// Metrics, when set, receives the bus's figures: subscriptions,
	// acks by outcome, retries and dead letters (meshagent_bus_…). One
	// bus per registry.
	Metrics prometheus.Registerer
}

// DefaultConfig returns every default in one place.
func DefaultConfig() Config {
	return Config{
		DefaultPropagation: PropagationStopOnProcessed,
		MaxAttempts:        3,
		MessageTTL:         7 * 24 * time.Hour,
		RetryBackoff:       time.Second,
		MaxBackoff:         time.Minute,
		DeliveryTimeout:    30 * time.Second,
		MeshWait:           2 * time.Second,
		Logger:             slog.Default(),
		Now:                time.Now,
	}
}

// Option configures a Bus.
type Option func(*Config) error

// Apply applies opts in order, skipping nil ones.
func (c *Config) Apply(opts ...Option) error {
	for i, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return fmt.Errorf("bus: option %d: %w", i, err)
		}
	}
	return nil
}

// Validate checks the configuration as a whole.
func (c *Config) Validate() error {
	switch {
	case !c.DefaultPropagation.valid():
		return fmt.Errorf("bus: unknown default propagation %q", c.DefaultPropagation)
	case c.MaxAttempts < 1:
		return errors.New("bus: MaxAttempts must be at least 1")
	case c.MessageTTL <= 0:
		return errors.New("bus: MessageTTL must be positive")
	case c.RetryBackoff <= 0 || c.MaxBackoff < c.RetryBackoff:
		return errors.New("bus: backoffs must be positive, MaxBackoff at least RetryBackoff")
	case c.DeliveryTimeout <= 0 || c.MeshWait < 0:
		return errors.New("bus: DeliveryTimeout must be positive and MeshWait not negative")
	case c.Logger == nil:
		return errors.New("bus: Logger is nil")
	case c.Now == nil:
		return errors.New("bus: Now is nil")
	}
	return nil
}

// backoff is the wait before the next delivery of a message delivered
// attempts times before (0 after its first delivery), unless the
// subscriber asked for retry_seconds.
func (c *Config) backoff(attempts int, a attempt) time.Duration {
	if a.err == nil && a.pr.RetrySeconds > 0 {
		return min(time.Duration(a.pr.RetrySeconds)*time.Second, c.MaxBackoff)
	}
	if attempts >= 32 || c.RetryBackoff<<attempts > c.MaxBackoff || c.RetryBackoff<<attempts <= 0 {
		return c.MaxBackoff
	}
	return c.RetryBackoff << attempts
}

// WithTopics carries the bus's topics across the mesh through t (see
// Config.Topics), usually the bus's Mesh itself: bus.New(srv, n,
// bus.WithTopics(n)). The bus publishes under message ids it chooses, so
// that it knows its own messages when they come back. A nil t is refused.
func WithTopics(t rpc.IDPublisher) Option {
	return func(c *Config) error {
		if t == nil {
			return errors.New("nil IDPublisher")
		}
		c.Topics = t
		return nil
	}
}

// WithForwarder queues messages for agents that are away in f's outbox
// (see Config.Forwarder), usually the bus's Mesh itself: bus.New(srv, n,
// bus.WithForwarder(n)). A nil f is refused.
func WithForwarder(f Forwarder) Option {
	return func(c *Config) error {
		if f == nil {
			return errors.New("nil Forwarder")
		}
		c.Forwarder = f
		return nil
	}
}

// WithStore persists the outbox, dead letters and history in st (see
// Config.Store).
func WithStore(st *store.Store) Option {
	return func(c *Config) error { c.Store = st; return nil }
}

// WithLogger sets the logger. A nil logger is refused.
func WithLogger(l *slog.Logger) Option {
	return func(c *Config) error {
		if l == nil {
			return errors.New("nil logger")
		}
		c.Logger = l
		return nil
	}
}

// WithClock sets the clock that stamps messages and schedules retries.
func WithClock(now func() time.Time) Option {
	return func(c *Config) error {
		if now == nil {
			return errors.New("nil clock")
		}
		c.Now = now
		return nil
	}
}

// WithMessageTTL bounds how long a message waits for its subscriber.
func WithMessageTTL(d time.Duration) Option {
	return func(c *Config) error { c.MessageTTL = d; return nil }
}

// WithRetryBackoff sets the first wait before a retry and the most it
// grows to.
func WithRetryBackoff(first, most time.Duration) Option {
	return func(c *Config) error { c.RetryBackoff, c.MaxBackoff = first, most; return nil }
}

// WithDeliveryTimeout bounds one delivery.
func WithDeliveryTimeout(d time.Duration) Option {
	return func(c *Config) error { c.DeliveryTimeout = d; return nil }
}

// WithMeshWait bounds how long sendMessage waits for mesh topic peers.
func WithMeshWait(d time.Duration) Option {
	return func(c *Config) error { c.MeshWait = d; return nil }
}

// WithMetrics records the bus's figures in reg (see Config.Metrics).
func WithMetrics(reg prometheus.Registerer) Option {
	return func(c *Config) error { c.Metrics = reg; return nil }
}
