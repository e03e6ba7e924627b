package mailbox

import (
	"errors"
	"log/slog"
	"time"
)

// Defaults of a Server.
const (
	// DefaultTTL is how long an item waits for its agent (seed 004's
	// seven days, as the sender's outbox).
	DefaultTTL = 7 * 24 * time.Hour
	// DefaultPerAgent bounds the items held for one agent.
	DefaultPerAgent = 1000
	// DefaultPerAgentBytes bounds the envelope bytes held for one agent.
	DefaultPerAgentBytes = 16 << 20
	// DefaultPerSender and DefaultPerSenderBytes bound what one sender
	// holds in one agent's mailbox: a tenth of it, so that a sender alone
	// cannot fill it.
	DefaultPerSender      = DefaultPerAgent / 10
	DefaultPerSenderBytes = DefaultPerAgentBytes / 10
	// DefaultTotalBytes bounds the envelope bytes held for all agents.
	DefaultTotalBytes = 256 << 20
	// DefaultSenderTotalBytes bounds what one sender holds on the relay,
	// for all agents: a sixteenth of it, so that one sender spreading its
	// deposits over many agents cannot fill the relay.
	DefaultSenderTotalBytes = DefaultTotalBytes / 16
	// DefaultUnknownTotalBytes bounds what senders unknown to their
	// recipients hold on the relay, all together: half of it, so that a
	// flood of fresh identities (throwaway senders to throwaway
	// recipients) leaves the other half to the senders agents already
	// took mail from.
	DefaultUnknownTotalBytes = DefaultTotalBytes / 2
	// DefaultReservedItems and DefaultReservedBytes are the part of each
	// agent's mailbox that only its known senders (those it took an item
	// from on this relay) may fill: half of it. Senders it never took
	// anything from share the other half.
	DefaultReservedItems = DefaultPerAgent / 2
	DefaultReservedBytes = DefaultPerAgentBytes / 2
	// DefaultMaxAgents bounds the agents the relay holds mail for (those
	// that named it as their mailbox), and DefaultMaxKnown the
	// (agent, known sender) pairs it remembers.
	DefaultMaxAgents = 100_000
	DefaultMaxKnown  = 200_000
	// DefaultDisplaceAfter is how long an item its agent deferred (no
	// handler for it yet) keeps its place in a full mailbox: long enough
	// for the agent's program to restart and attach its handlers.
	DefaultDisplaceAfter = time.Hour
	// DefaultIOTimeout bounds a request's reads and writes.
	DefaultIOTimeout = 10 * time.Second
	// Queue is the store queue a Server keeps its items in.
	Queue = "mailbox"
)

// Config configures a Server.
type Config struct {
	// TTL is how long an item waits for its agent before it is deleted.
	TTL time.Duration
	// PerAgent and PerAgentBytes bound what one agent's mailbox holds;
	// TotalBytes what the relay holds. A deposit past them is "full".
	PerAgent      int
	PerAgentBytes int64
	TotalBytes    int64
	// PerSender and PerSenderBytes bound what one sender (the envelope's
	// signer) holds in one agent's mailbox. A deposit past them is
	// "full".
	PerSender      int
	PerSenderBytes int64
	// SenderTotalBytes bounds what one sender holds on the relay, for all
	// agents. A deposit past it is "full".
	SenderTotalBytes int64
	// UnknownTotalBytes bounds what all deposits from senders unknown to
	// their recipients (see ReservedItems) hold on the relay together; the
	// rest of TotalBytes is kept for known senders' deposits. A deposit
	// from an unknown sender past it is "full".
	UnknownTotalBytes int64
	// ReservedItems and ReservedBytes are the part of each agent's
	// mailbox kept for its known senders: a sender the agent never took
	// an item from may deposit only while the mailbox holds less than
	// PerAgent-ReservedItems items and PerAgentBytes-ReservedBytes bytes.
	ReservedItems int
	ReservedBytes int64
	// MaxAgents bounds the agents the relay holds mail for; MaxKnown the
	// (agent, known sender) pairs it remembers.
	MaxAgents int
	MaxKnown  int
	// DisplaceAfter is how long an item its agent deferred keeps its place
	// in a full mailbox: past it, a deposit the agent's bounds would
	// refuse takes its place (see the package doc, Storage). Zero: at
	// once.
	DisplaceAfter time.Duration
	// MaxSkew is how far in the future a deposited envelope's time may be.
	MaxSkew time.Duration
	// IOTimeout bounds each request's reads and writes.
	IOTimeout time.Duration
	// Logger receives the Server's logs. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// DefaultConfig returns every default in one place.
func DefaultConfig() Config {
	return Config{
		TTL:               DefaultTTL,
		PerAgent:          DefaultPerAgent,
		PerAgentBytes:     DefaultPerAgentBytes,
		TotalBytes:        DefaultTotalBytes,
		PerSender:         DefaultPerSender,
		PerSenderBytes:    DefaultPerSenderBytes,
		SenderTotalBytes:  DefaultSenderTotalBytes,
		UnknownTotalBytes: DefaultUnknownTotalBytes,
		ReservedItems:     DefaultReservedItems,
		ReservedBytes:     DefaultReservedBytes,
		MaxAgents:         DefaultMaxAgents,
		MaxKnown:          DefaultMaxKnown,
		DisplaceAfter:     DefaultDisplaceAfter,
		MaxSkew:           2 * time.Minute,
		IOTimeout:         DefaultIOTimeout,
		Now:               time.Now,
	}
}

// Option configures a Server.
type Option func(*Config) error

// Validate checks the configuration after the options.
func (c *Config) Validate() error {
	switch {
	case c.TTL <= 0 || c.MaxSkew < 0 || c.IOTimeout <= 0 || c.DisplaceAfter < 0:
		return errors.New("mailbox: TTL and I/O timeout must be positive, skew and displace-after not negative")
	case c.PerAgent <= 0 || c.PerAgentBytes <= 0 || c.TotalBytes <= 0 || c.PerSender <= 0 || c.PerSenderBytes <= 0 ||
		c.SenderTotalBytes <= 0 || c.MaxAgents <= 0 || c.MaxKnown <= 0:
		return errors.New("mailbox: bounds must be positive")
	case c.UnknownTotalBytes <= 0 || c.UnknownTotalBytes > c.TotalBytes:
		return errors.New("mailbox: the unknown senders' part of the relay must be positive and at most its total")
	case c.ReservedItems < 0 || c.ReservedItems >= c.PerAgent || c.ReservedBytes < 0 || c.ReservedBytes >= c.PerAgentBytes:
		return errors.New("mailbox: the reserve for known senders must be less than an agent's mailbox")
	case c.Now == nil:
		return errors.New("mailbox: a clock is required")
	}
	return nil
}

// WithTTL sets how long an item waits for its agent.
func WithTTL(d time.Duration) Option {
	return func(c *Config) error { c.TTL = d; return nil }
}

// WithBounds bounds one agent's mailbox (items and bytes) and the relay's
// total bytes. The reserve for known senders becomes half of the
// agent's bounds and half of the relay's, and a sender's share of the
// relay a sixteenth of it, unless WithReserve, WithUnknownTotal and
// WithSenderTotal (given after) say otherwise.
func WithBounds(perAgent int, perAgentBytes, totalBytes int64) Option {
	return func(c *Config) error {
		c.PerAgent, c.PerAgentBytes, c.TotalBytes = perAgent, perAgentBytes, totalBytes
		c.ReservedItems, c.ReservedBytes = perAgent/2, perAgentBytes/2
		c.SenderTotalBytes = max(totalBytes/16, MaxEnvelopeBytes)
		c.UnknownTotalBytes = totalBytes / 2
		return nil
	}
}

// WithUnknownTotal bounds, in bytes, what senders unknown to their
// recipients hold on the relay together; the rest of its total is kept
// for the senders agents took mail from.
func WithUnknownTotal(bytes int64) Option {
	return func(c *Config) error { c.UnknownTotalBytes = bytes; return nil }
}

// WithReserve sets the part of each agent's mailbox kept for the senders
// it took items from (items and bytes).
func WithReserve(items int, bytes int64) Option {
	return func(c *Config) error { c.ReservedItems, c.ReservedBytes = items, bytes; return nil }
}

// WithSenderTotal bounds what one sender holds on the relay, for all
// agents, in bytes.
func WithSenderTotal(bytes int64) Option {
	return func(c *Config) error { c.SenderTotalBytes = bytes; return nil }
}

// WithMaxAgents bounds the agents the relay holds mail for, and the
// (agent, known sender) pairs it remembers.
func WithMaxAgents(agents, known int) Option {
	return func(c *Config) error { c.MaxAgents, c.MaxKnown = agents, known; return nil }
}

// WithSenderBounds bounds what one sender holds in one agent's mailbox
// (items and bytes).
func WithSenderBounds(items int, bytes int64) Option {
	return func(c *Config) error {
		c.PerSender, c.PerSenderBytes = items, bytes
		return nil
	}
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option {
	return func(c *Config) error { c.Logger = l; return nil }
}

// WithClock sets the clock (tests).
func WithClock(now func() time.Time) Option {
	return func(c *Config) error { c.Now = now; return nil }
}

// WithIOTimeout bounds each request's reads and writes.
func WithIOTimeout(d time.Duration) Option {
	return func(c *Config) error { c.IOTimeout = d; return nil }
}
