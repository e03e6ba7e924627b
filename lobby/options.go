package lobby

import (
	"errors"
	"fmt"
	"log/slog"
	"path"
	"time"

	"github.com/meshagent/meshagent/internal/wsconn"
)

// Limits bound what one client can make the lobby hold, and how many
// clients it holds: MaxMessageBytes per message (more is closed with
// 1009), SendQueue messages waiting per client (a full queue, or a write
// that misses WriteTimeout, disconnects it), MaxConcurrentCalls requests
// in flight per client, MaxClients and MaxClientsPerIP connections (a
// full lobby evicts its oldest connection that has no agent attached,
// and refuses with HTTP 503 or 429 only when every one has), InitTimeout
// for a connection to REGISTER or authenticate, and PingInterval between
// keep-alive pings (0: none). Every WebSocket listener of meshagent
// shares this type.
type Limits = wsconn.Limits

// DefaultLimits returns the limits a lobby uses unless told otherwise.
func DefaultLimits() Limits { return wsconn.DefaultLimits() }

// Config configures a Lobby. The zero value is not ready; start from
// DefaultConfig.
type Config struct {
	// Limits bound each connection and the number of clients.
	// MaxConcurrentCalls bounds the REQUESTs and DISCOVER_SERVICES one
	// connection has in flight; beyond it the lobby answers ERROR with
	// code RATE_LIMITED. Keep SendQueue at least MaxConcurrentCalls: all
	// the requests in flight may be answered at once, and a client whose
	// queue fills is disconnected. Default: DefaultLimits().
	Limits Limits
	// ID is the lobby's own agent id. Default: DefaultID.
	ID string
	// RequestTimeout bounds a REQUEST from its arrival to its final
	// RESPONSE, whether a lobby client or a mesh agent serves it; the
	// requester then receives a RESPONSE with status "error" and code
	// TIMEOUT. It also bounds Lobby.Serve when ctx has no earlier deadline.
	// Default: 30 s.
	RequestTimeout time.Duration
	// MaxRegistrations bounds the agents registered in the store (which
	// keeps them until they are removed from it: the seed has no
	// unregistering). A REGISTER of a new agent_id beyond it is refused
	// with ERROR code RATE_LIMITED; re-registering is always allowed.
	// Default: 10000.
	MaxRegistrations int
	// DiscoverTimeout bounds the mesh directory search of one
	// DISCOVER_SERVICES. Default: 3 s.
	DiscoverTimeout time.Duration
	// OriginPatterns lists the browser origins allowed to connect: a
	// pattern is matched (path.Match, case-insensitive) against an
	// Origin's host[:port], or against scheme://host[:port] if it contains
	// "://"; "*" allows every origin. Default: none (clients without an
	// Origin header are always accepted).
	OriginPatterns []string
	// Logger receives structured logs. Default: slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns every default in one place.
func DefaultConfig() Config {
	return Config{
		Limits:           DefaultLimits(),
		ID:               DefaultID,
		RequestTimeout:   30 * time.Second,
		DiscoverTimeout:  3 * time.Second,
		MaxRegistrations: 10000,
		Logger:           slog.Default(),
	}
}

// Option configures a Lobby.
type Option func(*Config) error

// Apply applies opts in order, skipping nil ones.
func (c *Config) Apply(opts ...Option) error {
	for i, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return fmt.Errorf("lobby: option %d: %w", i, err)
		}
	}
	return nil
}

// Validate checks the configuration as a whole.
func (c *Config) Validate() error {
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("lobby: %w", err)
	}
	switch {
	case c.ID == "" || len(c.ID) > MaxIDLen:
		return fmt.Errorf("lobby: Config.ID must be 1 to %d bytes", MaxIDLen)
	case c.RequestTimeout <= 0:
		return errors.New("lobby: Config.RequestTimeout must be positive")
	case c.DiscoverTimeout <= 0:
		return errors.New("lobby: Config.DiscoverTimeout must be positive")
	case c.MaxRegistrations < 1:
		return errors.New("lobby: Config.MaxRegistrations must be positive")
	case c.Logger == nil:
		return errors.New("lobby: Config.Logger is nil")
	}
	for _, p := range c.OriginPatterns {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("lobby: origin pattern %q: %w", p, err)
		}
	}
	return nil
}

// WithLogger sets the lobby's logger. A nil logger is refused.
func WithLogger(l *slog.Logger) Option {
	return func(c *Config) error {
		if l == nil {
			return errors.New("nil logger")
		}
		c.Logger = l
		return nil
	}
}

// WithLimits replaces the lobby's connection limits.
func WithLimits(l Limits) Option {
	return func(c *Config) error {
		if err := l.Validate(); err != nil {
			return err
		}
		c.Limits = l
		return nil
	}
}

// WithID sets the lobby's own agent id (DefaultID otherwise).
func WithID(id string) Option {
	return func(c *Config) error {
		if id == "" || len(id) > MaxIDLen {
			return fmt.Errorf("lobby id must be 1 to %d bytes", MaxIDLen)
		}
		c.ID = id
		return nil
	}
}

// WithRequestTimeout bounds each REQUEST (see
// Config.RequestTimeout).
func WithRequestTimeout(d time.Duration) Option {
	return func(c *Config) error {
		if d <= 0 {
			return errors.New("request timeout must be positive")
		}
		c.RequestTimeout = d
		return nil
	}
}

// WithDiscoverTimeout bounds the mesh part of each DISCOVER_SERVICES.
func WithDiscoverTimeout(d time.Duration) Option {
	return func(c *Config) error {
		if d <= 0 {
			return errors.New("discover timeout must be positive")
		}
		c.DiscoverTimeout = d
		return nil
	}
}

// WithOriginPatterns allows browser pages from origins matching these
// patterns to connect (see Config.OriginPatterns).
func WithOriginPatterns(patterns ...string) Option {
	return func(c *Config) error {
		for _, p := range patterns {
			if _, err := path.Match(p, ""); err != nil {
				return fmt.Errorf("origin pattern %q: %w", p, err)
			}
		}
		c.OriginPatterns = append(c.OriginPatterns, patterns...)
		return nil
	}
}

// WithMaxRegistrations bounds the agents registered in the store (see
// Config.MaxRegistrations).
func WithMaxRegistrations(n int) Option {
	return func(c *Config) error {
		if n < 1 {
			return errors.New("max registrations must be positive")
		}
		c.MaxRegistrations = n
		return nil
	}
}
