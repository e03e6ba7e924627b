package relay

import (
	"errors"
	"fmt"
	"log/slog"
	"path"
	"time"
)

// LobbyConfig configures a Lobby. The zero value is not ready; start from
// DefaultLobbyConfig.
type LobbyConfig struct {
	// Limits bound each connection, as for the bus (MaxBatch is unused:
	// the lobby has no batches). MaxConcurrentCalls bounds the REQUESTs
	// and DISCOVER_SERVICES one connection has in flight; beyond it the
	// lobby answers ERROR with code RATE_LIMITED. Keep SendQueue at least
	// MaxConcurrentCalls: all the requests in flight may be answered at
	// once, and a client whose queue fills is disconnected. Default:
	// DefaultLimits().
	Limits Limits
	// LobbyID is the lobby's agent id. Default: DefaultLobbyID.
	LobbyID string
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
	// OriginPatterns lists the browser origins allowed to connect, as
	// Config.OriginPatterns. Default: none (clients without an Origin
	// header are always accepted).
	OriginPatterns []string
	// Logger receives structured logs. Default: slog.Default().
	Logger *slog.Logger
}

// DefaultLobbyConfig returns every default in one place.
func DefaultLobbyConfig() LobbyConfig {
	return LobbyConfig{
		Limits:           DefaultLimits(),
		LobbyID:          DefaultLobbyID,
		RequestTimeout:   30 * time.Second,
		DiscoverTimeout:  3 * time.Second,
		MaxRegistrations: 10000,
		Logger:           slog.Default(),
	}
}

// LobbyOption configures a Lobby.
type LobbyOption func(*LobbyConfig) error

// Apply applies opts in order, skipping nil ones.
func (c *LobbyConfig) Apply(opts ...LobbyOption) error {
	for i, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return fmt.Errorf("relay: lobby option %d: %w", i, err)
		}
	}
	return nil
}

// Validate checks the configuration as a whole.
func (c *LobbyConfig) Validate() error {
	if err := c.Limits.Validate(); err != nil {
		return err
	}
	switch {
	case c.LobbyID == "" || len(c.LobbyID) > MaxLobbyIDLen:
		return fmt.Errorf("relay: LobbyConfig.LobbyID must be 1 to %d bytes", MaxLobbyIDLen)
	case c.RequestTimeout <= 0:
		return errors.New("relay: LobbyConfig.RequestTimeout must be positive")
	case c.DiscoverTimeout <= 0:
		return errors.New("relay: LobbyConfig.DiscoverTimeout must be positive")
	case c.MaxRegistrations < 1:
		return errors.New("relay: LobbyConfig.MaxRegistrations must be positive")
	case c.Logger == nil:
		return errors.New("relay: LobbyConfig.Logger is nil")
	}
	for _, p := range c.OriginPatterns {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("relay: origin pattern %q: %w", p, err)
		}
	}
	return nil
}

// WithLobbyLogger sets the lobby's logger. A nil logger is refused.
func WithLobbyLogger(l *slog.Logger) LobbyOption {
	return func(c *LobbyConfig) error {
		if l == nil {
			return errors.New("nil logger")
		}
		c.Logger = l
		return nil
	}
}

// WithLobbyLimits replaces the lobby's connection limits.
func WithLobbyLimits(l Limits) LobbyOption {
	return func(c *LobbyConfig) error {
		if err := l.Validate(); err != nil {
			return err
		}
		c.Limits = l
		return nil
	}
}

// WithLobbyID sets the lobby's own agent id (DefaultLobbyID otherwise).
func WithLobbyID(id string) LobbyOption {
	return func(c *LobbyConfig) error {
		if id == "" || len(id) > MaxLobbyIDLen {
			return fmt.Errorf("lobby id must be 1 to %d bytes", MaxLobbyIDLen)
		}
		c.LobbyID = id
		return nil
	}
}

// WithLobbyRequestTimeout bounds each REQUEST (see
// LobbyConfig.RequestTimeout).
func WithLobbyRequestTimeout(d time.Duration) LobbyOption {
	return func(c *LobbyConfig) error {
		if d <= 0 {
			return errors.New("request timeout must be positive")
		}
		c.RequestTimeout = d
		return nil
	}
}

// WithLobbyDiscoverTimeout bounds the mesh part of each DISCOVER_SERVICES.
func WithLobbyDiscoverTimeout(d time.Duration) LobbyOption {
	return func(c *LobbyConfig) error {
		if d <= 0 {
			return errors.New("discover timeout must be positive")
		}
		c.DiscoverTimeout = d
		return nil
	}
}

// WithLobbyOriginPatterns allows browser pages from origins matching these
// patterns to connect (see Config.OriginPatterns).
func WithLobbyOriginPatterns(patterns ...string) LobbyOption {
	return func(c *LobbyConfig) error {
		for _, p := range patterns {
			if _, err := path.Match(p, ""); err != nil {
				return fmt.Errorf("origin pattern %q: %w", p, err)
			}
		}
		c.OriginPatterns = append(c.OriginPatterns, patterns...)
		return nil
	}
}

// WithLobbyMaxRegistrations bounds the agents registered in the store (see
// LobbyConfig.MaxRegistrations).
func WithLobbyMaxRegistrations(n int) LobbyOption {
	return func(c *LobbyConfig) error {
		if n < 1 {
			return errors.New("max registrations must be positive")
		}
		c.MaxRegistrations = n
		return nil
	}
}
