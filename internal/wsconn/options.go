package wsconn

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path"
	"time"
)

// Limits bound what one client can make a listener hold, and how many
// clients it holds. Every number must be positive, except PingInterval,
// where 0 turns keep-alive pings off.
type Limits struct {
	// MaxMessageBytes is the read limit per WebSocket message. A client
	// that sends more is disconnected with close status 1009.
	MaxMessageBytes int64
	// SendQueue is how many outgoing messages may wait per connection. A
	// client that lets the queue fill is disconnected as a slow consumer.
	SendQueue int
	// WriteTimeout bounds each write, the drain of an orderly close and
	// the closing handshake.
	WriteTimeout time.Duration
	// MaxConcurrentCalls bounds the jobs (Conn.Go) running at once per
	// connection.
	MaxConcurrentCalls int
	// MaxClients bounds the connections a Hub holds (see the package
	// doc's admission rules).
	MaxClients int
	// MaxClientsPerIP bounds the connections from one IP address, unless
	// it is in PerIPExempt.
	MaxClientsPerIP int
	// PerIPExempt lists the addresses MaxClientsPerIP does not count.
	PerIPExempt []netip.Prefix
	// InitTimeout is how long a connection may stay unestablished.
	InitTimeout time.Duration
	// PingInterval is how often each client is pinged; one that does not
	// answer within the interval is disconnected. 0 turns pings off.
	PingInterval time.Duration
}

// DefaultLimits returns the limits a Hub uses unless told otherwise.
func DefaultLimits() Limits {
	return Limits{
		MaxMessageBytes:    1 << 20,
		SendQueue:          256,
		WriteTimeout:       10 * time.Second,
		MaxConcurrentCalls: 64,
		MaxClients:         16384,
		MaxClientsPerIP:    64,
		PerIPExempt:        []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
		InitTimeout:        10 * time.Second,
		PingInterval:       30 * time.Second,
	}
}

// Validate reports the first field out of range. Its messages name the
// field as Limits.X, for callers that expose the same fields.
func (l Limits) Validate() error {
	switch {
	case l.MaxMessageBytes < 512:
		return errors.New("Limits.MaxMessageBytes must be at least 512")
	case l.SendQueue < 1:
		return errors.New("Limits.SendQueue must be positive")
	case l.WriteTimeout <= 0:
		return errors.New("Limits.WriteTimeout must be positive")
	case l.MaxConcurrentCalls < 1:
		return errors.New("Limits.MaxConcurrentCalls must be positive")
	case l.MaxClients < 1:
		return errors.New("Limits.MaxClients must be positive")
	case l.MaxClientsPerIP < 1:
		return errors.New("Limits.MaxClientsPerIP must be positive")
	case l.InitTimeout <= 0:
		return errors.New("Limits.InitTimeout must be positive")
	case l.PingInterval < 0:
		return errors.New("Limits.PingInterval must not be negative")
	}
	for _, p := range l.PerIPExempt {
		if !p.IsValid() {
			return errors.New("Limits.PerIPExempt holds an invalid prefix")
		}
	}
	return nil
}

// Config configures a Hub. The zero value is not ready; start from
// DefaultConfig.
type Config struct {
	// Limits bound each connection and the Hub. Default: DefaultLimits().
	Limits Limits
	// OriginPatterns lists the browser origins allowed to connect (see
	// OriginAllowed). Default: none; requests without an Origin header
	// are always accepted.
	OriginPatterns []string
	// LoopbackPages admits, besides OriginPatterns, a browser page served
	// by this very listener on a loopback address (see
	// SameLoopbackOrigin). Default: false.
	LoopbackPages bool
	// Logger receives structured logs; each connection's carry "client"
	// (its ID) and "remote_addr". Default: slog.Default().
	Logger *slog.Logger
	// InitDeadline is the close reason sent to a connection that did not
	// establish itself within Limits.InitTimeout: a format with one %v
	// verb, the timeout. Default: "init deadline: not established within
	// %v".
	InitDeadline string
	// ErrorPrefix starts the body of the HTTP errors Serve answers with
	// ("relay: origin not allowed"). Default: "wsconn".
	ErrorPrefix string
}

// DefaultConfig returns every default in one place.
func DefaultConfig() Config {
	return Config{
		Limits:       DefaultLimits(),
		Logger:       slog.Default(),
		InitDeadline: "init deadline: not established within %v",
		ErrorPrefix:  "wsconn",
	}
}

// Validate checks the configuration as a whole.
func (c *Config) Validate() error {
	if err := c.Limits.Validate(); err != nil {
		return fmt.Errorf("wsconn: %w", err)
	}
	for _, p := range c.OriginPatterns {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("wsconn: origin pattern %q: %w", p, err)
		}
	}
	switch {
	case c.Logger == nil:
		return errors.New("wsconn: Config.Logger is nil")
	case c.InitDeadline == "":
		return errors.New("wsconn: Config.InitDeadline is empty")
	case c.ErrorPrefix == "":
		return errors.New("wsconn: Config.ErrorPrefix is empty")
	}
	return nil
}
