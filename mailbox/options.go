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
		TTL:            DefaultTTL,
		PerAgent:       DefaultPerAgent,
		PerAgentBytes:  DefaultPerAgentBytes,
		TotalBytes:     DefaultTotalBytes,
		PerSender:      DefaultPerSender,
		PerSenderBytes: DefaultPerSenderBytes,
		DisplaceAfter:  DefaultDisplaceAfter,
		MaxSkew:        2 * time.Minute,
		IOTimeout:      DefaultIOTimeout,
		Now:            time.Now,
	}
}

// Option configures a Server.
type Option func(*Config) error

// Validate checks the configuration after the options.
func (c *Config) Validate() error {
	switch {
	case c.TTL <= 0 || c.MaxSkew < 0 || c.IOTimeout <= 0 || c.DisplaceAfter < 0:
		return errors.New("mailbox: TTL and I/O timeout must be positive, skew and displace-after not negative")
	case c.PerAgent <= 0 || c.PerAgentBytes <= 0 || c.TotalBytes <= 0 || c.PerSender <= 0 || c.PerSenderBytes <= 0:
		return errors.New("mailbox: bounds must be positive")
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
// total bytes.
func WithBounds(perAgent int, perAgentBytes, totalBytes int64) Option {
	return func(c *Config) error {
		c.PerAgent, c.PerAgentBytes, c.TotalBytes = perAgent, perAgentBytes, totalBytes
		return nil
	}
}

// WithSenderBounds bounds what one sender holds in one agent's mailbox
// (items and bytes).
func WithSenderBounds(items int, bytes int64) Option {
	return func(c *Config) error {
		c.PerSender, c.PerSenderBytes = items, bytes
		return nil
	}
}

// WithDisplaceAfter sets how long an item its agent deferred keeps its
// place in a full mailbox.
func WithDisplaceAfter(d time.Duration) Option {
	return func(c *Config) error { c.DisplaceAfter = d; return nil }
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
