package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Limits bound what one WebSocket client can make the server hold.
type Limits struct {
	// MaxMessageBytes is the read limit per WebSocket message.
	MaxMessageBytes int64
	// SendQueue is how many outgoing messages may wait per connection;
	// a client that lets it fill is disconnected.
	SendQueue int
	// WriteTimeout bounds each write to a client.
	WriteTimeout time.Duration
	// MaxConcurrentCalls bounds requests running at once per connection.
	MaxConcurrentCalls int
	// MaxBatch bounds the number of requests in one batch.
	MaxBatch int
}

// DefaultLimits returns the limits a server uses unless told otherwise.
func DefaultLimits() Limits {
	return Limits{
		MaxMessageBytes:    1 << 20,
		SendQueue:          256,
		WriteTimeout:       10 * time.Second,
		MaxConcurrentCalls: 64,
		MaxBatch:           100,
	}
}

func (l Limits) validate() error {
	if l.MaxMessageBytes < 1024 || l.SendQueue < 1 || l.WriteTimeout <= 0 || l.MaxConcurrentCalls < 1 || l.MaxBatch < 1 {
		return errors.New("relay: limits must be positive (MaxMessageBytes at least 1 KiB)")
	}
	return nil
}

// Config configures a server.
type Config struct {
	// Limits bound each connection. Default DefaultLimits().
	Limits Limits
	// OriginPatterns lists browser origins (host patterns, as
	// coder/websocket reads them) allowed to connect. Requests without an
	// Origin header (non-browser clients) are always allowed; by default a
	// browser page may connect only from the server's own host, which
	// keeps web pages from driving a local node.
	OriginPatterns []string
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger
}

// Option configures a server.
type Option func(*Config) error

// WithLimits replaces the connection limits.
func WithLimits(l Limits) Option {
	return func(c *Config) error {
		if err := l.validate(); err != nil {
			return err
		}
		c.Limits = l
		return nil
	}
}

// WithOriginPatterns allows browser pages from these origins to connect.
func WithOriginPatterns(patterns ...string) Option {
	return func(c *Config) error { c.OriginPatterns = append(c.OriginPatterns, patterns...); return nil }
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option {
	return func(c *Config) error { c.Logger = l; return nil }
}

func (c *Config) apply(opts ...Option) error {
	for i, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return fmt.Errorf("relay: option %d: %w", i, err)
		}
	}
	return nil
}
