package daemon

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// StoreFileName is the message store's file under Config.DataDir.
const StoreFileName = "store.db"

// storeReserve is the disk the store keeps beside its file (store.db.reserve)
// for a full disk: what was acknowledged and is written afterwards (the
// bus's history) lands in its room, while new messages are refused with
// -32005 until space returns (see store.WithReserve).
const storeReserve = 4 << 20

// Config configures a Daemon. Start from DefaultConfig; Start applies the
// options and validates the result.
type Config struct {
	// Logger receives every part's structured logs. Default: slog.Default().
	Logger *slog.Logger
	// Level is the process's log level, which the local API's
	// mesh.logLevel reads and changes. Default: a level of its own at info.
	Level *slog.LevelVar

	// Node, when set, is the node served as it is: the daemon neither
	// builds nor closes it, and NodeOptions and Bootstrap's dialling are
	// the caller's business (tests serve nodes they built). Otherwise the daemon builds one from NodeOptions, with its
	// store, metrics, logger, Bootstrap and Services added.
	Node        *node.Node
	NodeOptions []node.Option
	// Bootstrap are the peers dialled at start; /readyz waits for one.
	Bootstrap []ma.Multiaddr
	// Services are the node's own capabilities (on a relay, offered beside
	// its lobby agents'). CapabilitiesFile, when set, is where they came
	// from: ReloadCapabilities reads it again with ParseOptions.
	Services         []node.Service
	CapabilitiesFile string
	ParseOptions     []node.ParseOption
	// PolicyFile, when set, is the requester policy's file, which
	// ReloadPolicy reads again.
	PolicyFile string
	// HoldMessages refuses direct messages, which their senders' nodes
	// keep and retry, until a local API client takes them.
	HoldMessages bool

	// Store, when set, is the message store, used and not closed.
	// Otherwise DataDir, when set, holds one (StoreFileName) that the
	// daemon opens and closes, keeping kept topic messages for KeepAge
	// within KeepBytes. Without either the bus keeps no outbox or history.
	Store     *store.Store
	DataDir   string
	KeepAge   time.Duration
	KeepBytes int64

	// API is the local API's host:port ("": none). Port 0 picks one.
	API string
	// MetricsAddr is a listener's host:port serving only /metrics,
	// /healthz and /readyz ("": none).
	MetricsAddr string
	// Public is a relay's public listener (Addr "": none).
	Public Public
	// AgentTokens turns on seed 003's REST surface on the local API
	// (nil: off), AgentRate its requests per minute per token;
	// AgentTokensFile is where ReloadAgentTokens reads them again.
	AgentTokens     *rpc.Tokens
	AgentTokensFile string
	AgentRate       int
	// ExchangeDir is seed 002's file exchange directory ("": none).
	ExchangeDir string
	// Poll is how often the settings files are checked for a change of
	// content and reloaded; 0 reloads only when asked (Reload).
	Poll time.Duration
}

// Public configures a relay's public listener: the bus at "/" and the
// lobby at "/lobby", for clients anywhere.
type Public struct {
	Addr string
	// Tokens, when set, are required of every connection (TokensFile is
	// where ReloadTokens reads them again); nil: anonymous clients.
	Tokens     *rpc.Tokens
	TokensFile string
	// TLS, when set, serves wss; nil: plain ws.
	TLS *tls.Config
	// MaxClients bounds the bus server's WebSocket connections, on the
	// local API and the public listener together (0: rpc.DefaultMaxClients).
	MaxClients int
}

// limits returns the bus server's connection limits under p.
func (p Public) limits() rpc.Limits {
	l := rpc.DefaultLimits()
	if p.MaxClients > 0 {
		l.MaxClients = p.MaxClients
	}
	return l
}

// DefaultConfig returns every default in one place.
func DefaultConfig() Config {
	return Config{
		Logger:    slog.Default(),
		KeepAge:   store.DefaultKeptRetention,
		KeepBytes: store.DefaultMaxKeptBytes,
		AgentRate: localapi.DefaultRequestsPerMinute,
	}
}

// Option configures a Daemon.
type Option func(*Config) error

// Apply applies opts in order, skipping nil ones.
func (c *Config) Apply(opts ...Option) error {
	for i, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return fmt.Errorf("daemon: option %d: %w", i, err)
		}
	}
	return nil
}

// Validate reports a configuration the daemon cannot run.
func (c *Config) Validate() error {
	switch {
	case c.Logger == nil:
		return errors.New("daemon: no logger")
	case c.KeepAge <= 0 || c.KeepBytes <= 0:
		return fmt.Errorf("daemon: kept history bounds %s and %d bytes must be positive", c.KeepAge, c.KeepBytes)
	case c.AgentRate < 1:
		return fmt.Errorf("daemon: agent rate %d is not positive", c.AgentRate)
	case c.Poll < 0:
		return fmt.Errorf("daemon: poll interval %s is negative", c.Poll)
	case c.Public.MaxClients < 0:
		return fmt.Errorf("daemon: max clients %d is negative", c.Public.MaxClients)
	case c.AgentTokens != nil && c.API == "":
		return errors.New("daemon: seed 003's REST surface is served on the local API, which is off")
	case c.Public.TokensFile != "" && (c.Public.Tokens == nil || c.Public.Addr == ""):
		return errors.New("daemon: a public tokens file without a public listener and its tokens")
	case c.AgentTokensFile != "" && c.AgentTokens == nil:
		return errors.New("daemon: an agent tokens file without the tokens")
	}
	return nil
}

// WithConfig replaces the configuration with cfg: for a caller that
// resolved every setting itself (cli).
func WithConfig(cfg Config) Option {
	return func(c *Config) error { *c = cfg; return nil }
}

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option {
	return func(c *Config) error { c.Logger = l; return nil }
}

// WithNode serves n as it is (see Config.Node).
func WithNode(n *node.Node) Option {
	return func(c *Config) error { c.Node = n; return nil }
}

// WithStore gives the bus (and a node the daemon builds) st, which the
// caller closes.
func WithStore(st *store.Store) Option {
	return func(c *Config) error { c.Store = st; return nil }
}

// WithAPI serves the local API on addr (host:port).
func WithAPI(addr string) Option {
	return func(c *Config) error { c.API = addr; return nil }
}

// WithPublic serves a relay's public listener.
func WithPublic(p Public) Option {
	return func(c *Config) error { c.Public = p; return nil }
}
