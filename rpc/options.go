package rpc

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"path"
	"time"

	"github.com/meshagent/meshagent/internal/wsconn"
)

// Limits bound what one WebSocket client can make a server hold, and how
// many clients a server (the bus, or the lobby) holds. Every number must
// be positive, except PingInterval, where 0 turns keep-alive pings off.
//
// Memory: a connection holds at most SendQueue encoded messages waiting to
// be written, MaxConcurrentCalls requests being served (each read whole,
// at most MaxMessageBytes) and MaxPendingCalls requests of the server's
// own (processMessage deliveries, mesh.handle) awaiting answers, so about
// (SendQueue + MaxConcurrentCalls + MaxPendingCalls) messages of at most
// MaxMessageBytes each (a delivery carries a payload some client sent); a
// server holds at most MaxClients connections, plus the ones being torn
// down (each for at most WriteTimeout). With the defaults that is 384
// messages per connection: 384 KiB with 1 KiB messages (6 GiB for a
// full server of busy clients; an idle one costs IdleClientBytes), and a worst case of 384 MiB per connection with messages
// at the 1 MiB limit. Size MaxMessageBytes (and SendQueue) for the
// messages clients really send.
type Limits struct {
	// MaxMessageBytes is the read limit per WebSocket message (one
	// JSON-RPC request or batch). A client that sends more is disconnected
	// with close status 1009; other clients are not affected.
	MaxMessageBytes int64
	// SendQueue is how many outgoing messages (responses, notifications,
	// server-initiated requests) may wait per connection. A client that
	// lets the queue fill is disconnected as a slow consumer; the server
	// never waits for it.
	SendQueue int
	// WriteTimeout bounds each write to a client, and the closing
	// handshake. A client that misses it is disconnected.
	WriteTimeout time.Duration
	// MaxBatch bounds the number of elements in one batch. Each element
	// takes a MaxConcurrentCalls slot while it runs, so keep MaxBatch at
	// most MaxConcurrentCalls.
	MaxBatch int
	// MaxConcurrentCalls bounds the requests and notifications being
	// served at once per connection. Beyond it a request is answered with
	// CodeServerBusy and a notification is dropped: the read loop never
	// blocks on a slow method.
	MaxConcurrentCalls int
	// MaxClients bounds the connections a server holds. When it is full
	// a new client still gets in: the oldest connection that has not yet
	// established itself (see InitTimeout) is closed to make room, with
	// close status 1008 and a reason saying so. An upgrade is refused with
	// HTTP 503 only when every connection is established.
	MaxClients int
	// MaxClientsPerIP bounds the connections from one IP address (IPv4, or
	// IPv6 as given, unmapped), with the same rule: the address's oldest
	// connection not yet established makes room, and only when all of
	// its connections are established is the upgrade refused with HTTP
	// 429. Addresses in PerIPExempt are not counted. Behind a reverse
	// proxy every client has the proxy's address: exempt it, or raise
	// the cap.
	MaxClientsPerIP int
	// PerIPExempt lists the addresses MaxClientsPerIP does not apply to.
	// Default: loopback (127.0.0.0/8 and ::1), so that the local API and
	// local tests are bounded by MaxClients only.
	PerIPExempt []netip.Prefix
	// InitTimeout is how long a connection may stay unestablished. A bus
	// connection is established by a successful initialize (seed 001), or
	// by a served mesh.* request (a local API client, which does not
	// initialize); a lobby connection by a REGISTER, or a message whose
	// auth_token binds it to its agent. A connection still unestablished
	// after InitTimeout, with no request of its own being served, is
	// closed with status 1008 and a reason naming the deadline; with a
	// request being served it is checked again InitTimeout later.
	InitTimeout time.Duration
	// MaxPendingCalls bounds the server's own requests awaiting a
	// client's answers on one connection (processMessage deliveries of
	// the bus, mesh.handle). A delivery beyond it waits for a free slot,
	// within its own timeout (bus.Config.DeliveryTimeout), so a busy
	// subscriber slows its senders down instead of overrunning its send
	// queue: a client that reads is never disconnected as a slow
	// consumer by deliveries, and one that stops reading is disconnected
	// when a write misses WriteTimeout. Keep MaxPendingCalls +
	// MaxConcurrentCalls below SendQueue, which also holds the responses
	// to the client's own requests and notifications.
	MaxPendingCalls int
	// PingInterval is how often the server pings each client; a client
	// that does not answer within the interval is disconnected. 0 turns
	// pings off.
	PingInterval time.Duration
}

// DefaultMaxClients is Limits.MaxClients unless told otherwise (a relay's
// --max-clients): 16,384 idle initialized clients cost about
// IdleClientBytes each.
const DefaultMaxClients = 16384

// IdleClientBytes bounds what an idle initialized client costs a server
// (heap and goroutine stacks), as BenchmarkIdleClients in package bus
// measures it.
const IdleClientBytes = 50 << 10

// DefaultLimits returns the limits a server uses unless told otherwise.
func DefaultLimits() Limits {
	return Limits{
		MaxMessageBytes:    1 << 20, // 1 MiB, the mesh's own frame limit
		SendQueue:          256,
		WriteTimeout:       10 * time.Second,
		MaxBatch:           64,
		MaxConcurrentCalls: 64,
		MaxClients:         DefaultMaxClients,
		MaxClientsPerIP:    64,
		PerIPExempt:        []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
		InitTimeout:        10 * time.Second,
		MaxPendingCalls:    64,
		PingInterval:       30 * time.Second,
	}
}

// Validate reports the first field out of range.
func (l Limits) Validate() error {
	switch {
	case l.MaxBatch < 1:
		return errors.New("rpc: Limits.MaxBatch must be positive")
	case l.MaxPendingCalls < 1:
		return errors.New("rpc: Limits.MaxPendingCalls must be positive")
	}
	if err := l.transport().Validate(); err != nil {
		return fmt.Errorf("rpc: %w", err)
	}
	return nil
}

// Config configures a Server. The zero value is not ready; start from
// DefaultConfig.
type Config struct {
	// HTTP, when set, answers the local API's paths other than "/" (the
	// process's /metrics, /healthz and /readyz); unset, they are 404.
	HTTP http.Handler

	// Limits bound each connection. Default: DefaultLimits().
	Limits Limits
	// OriginPatterns lists the browser origins allowed to connect. A
	// WebSocket request without an Origin header (the CLI, agents in any
	// language) is always accepted. A request with one comes from a
	// browser page and is accepted only if the origin matches a pattern.
	// A pattern is matched (path.Match, case-insensitive) against the
	// origin's host[:port], or against scheme://host[:port] if the pattern
	// contains "://"; "*" allows every origin.
	//
	// Default: none. The server serves no pages of its own, and a node's
	// local API on loopback must not be drivable by whatever web page the
	// user happens to open (a same-origin check alone would not stop DNS
	// rebinding), so browsers are refused unless configured.
	OriginPatterns []string
	// LoopbackPages admits the pages this server's own listener serves on
	// a loopback address (the status page) as browser clients, besides
	// OriginPatterns (WithLoopbackPages). Default: false.
	LoopbackPages bool
	// Logger receives structured logs. Default: slog.Default().
	Logger *slog.Logger
	// Clock tells the time: ping's timestamp, and Server.Now for the
	// methods registered on the server. Default: time.Now.
	Clock func() time.Time
	// Control serves the operator's methods (mesh.connect, mesh.logLevel,
	// mesh.status) and the node's addresses in mesh.id. Default: nil, and
	// those methods are not found. Set it only for a node's loopback
	// local API (WithControl).
	Control Control
	// Provider lets the server's clients serve capabilities and exchange
	// direct messages through the node (WithProvider). Default: nil, and
	// those methods are not found.
	Provider Provider
	// Topics serves mesh.publish, mesh.subscribe and mesh.unsubscribe,
	// and seed 004's broadcasts and notifications (WithTopics). Default:
	// nil, and they are answered -32601.
	Topics Publisher
	// Durables serves mesh.subscribe with "durable" (WithDurables); it
	// needs Topics. Default: nil, and such a subscribe is answered -32602.
	Durables DurableSubscriber
	// AnyCaller serves mesh.call without "agentId" (WithAnyCaller).
	// Default: nil, and "agentId" is required (-32602 without it).
	AnyCaller AnyCaller
	// ServeGrace is how long a capability whose last serving connection
	// went away stays offered, waiting for a client to serve it again.
	// Default: DefaultServeGrace.
	ServeGrace time.Duration
}

// DefaultConfig returns every default in one place.
func DefaultConfig() Config {
	return Config{Limits: DefaultLimits(), Logger: slog.Default(), Clock: time.Now, ServeGrace: DefaultServeGrace}
}

// Option configures a Server.
type Option func(*Config) error

// Apply applies opts in order, skipping nil ones.
func (c *Config) Apply(opts ...Option) error {
	for i, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return fmt.Errorf("rpc: option %d: %w", i, err)
		}
	}
	return nil
}

// Validate checks the configuration as a whole.
func (c *Config) Validate() error {
	if err := c.Limits.Validate(); err != nil {
		return err
	}
	for _, p := range c.OriginPatterns {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("rpc: origin pattern %q: %w", p, err)
		}
	}
	if c.Logger == nil {
		return errors.New("rpc: Config.Logger is nil")
	}
	if c.Clock == nil {
		return errors.New("rpc: Config.Clock is nil")
	}
	if c.Durables != nil && c.Topics == nil {
		return errors.New("rpc: durable subscriptions (Config.Durables) need topics (Config.Topics)")
	}
	return nil
}

// WithLimits replaces the connection limits.
func WithLimits(l Limits) Option {
	return func(c *Config) error {
		if err := l.Validate(); err != nil {
			return err
		}
		c.Limits = l
		return nil
	}
}

// WithOriginPatterns allows browser pages from origins matching these
// patterns to connect (see Config.OriginPatterns). WithOriginPatterns("*")
// allows any origin; use it only for a server meant for browsers.
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

// WithHTTPHandler serves h at the local API's paths other than "/" (see
// Server.ServeHTTP); "/" stays the WebSocket API.
func WithHTTPHandler(h http.Handler) Option {
	return func(c *Config) error { c.HTTP = h; return nil }
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

// WithClock replaces the server's clock (a fixed one makes ping's
// timestamp reproducible). A nil clock is refused.
func WithClock(now func() time.Time) Option {
	return func(c *Config) error {
		if now == nil {
			return errors.New("nil clock")
		}
		c.Clock = now
		return nil
	}
}

// hubConfig is the WebSocket plumbing's share of the configuration;
// initDeadline is the close reason of a connection that does not
// establish itself in time (a format with one %v, the timeout).
func (c *Config) hubConfig(log *slog.Logger, initDeadline string) wsconn.Config {
	return wsconn.Config{
		Limits:         c.Limits.transport(),
		OriginPatterns: c.OriginPatterns,
		LoopbackPages:  c.LoopbackPages,
		Logger:         log,
		InitDeadline:   initDeadline,
		ErrorPrefix:    "relay",
	}
}

// transport returns the limits the WebSocket plumbing enforces.
func (l Limits) transport() wsconn.Limits {
	return wsconn.Limits{
		MaxMessageBytes:    l.MaxMessageBytes,
		SendQueue:          l.SendQueue,
		WriteTimeout:       l.WriteTimeout,
		MaxConcurrentCalls: l.MaxConcurrentCalls,
		MaxClients:         l.MaxClients,
		MaxClientsPerIP:    l.MaxClientsPerIP,
		PerIPExempt:        l.PerIPExempt,
		InitTimeout:        l.InitTimeout,
		PingInterval:       l.PingInterval,
	}
}

// ClientConfig configures a Client.
type ClientConfig struct {
	// OnNotification receives every server notification other than
	// mesh.progress (which goes to the call it belongs to). It runs on the
	// client's read goroutine, in arrival order, and must not block.
	OnNotification func(method string, params json.RawMessage)
	// OnRequest serves requests the server sends to the client (seed 001's
	// processMessage, for example). Each runs on its own goroutine; ctx
	// ends when the client closes. Return an *Error to choose the
	// error code. Without it the client answers CodeMethodNotFound.
	OnRequest func(ctx context.Context, method string, params json.RawMessage) (any, error)
	// ReadLimit bounds one message from the server. Default: 16 MiB.
	ReadLimit int64
	// WriteTimeout bounds each write to the server. Default: 10 s.
	WriteTimeout time.Duration
	// HTTPHeader is sent with the WebSocket handshake.
	HTTPHeader http.Header
	// ClientID is the clientId Dial initializes with. Default: a fresh
	// "meshagent-go-<12 hex digits>".
	ClientID string
	// ClientInfo is initialize's clientInfo. Default: {"meshagent-go",
	// <protocol version>}.
	ClientInfo ClientInfo
	// TLSConfig configures wss:// connections (a private CA, say).
	// Default: the system's roots.
	TLSConfig *tls.Config
	// NoInitialize makes Dial skip initialize, for a caller that sends it
	// itself. Until it does, the server answers nothing but initialize.
	NoInitialize bool
}

// ClientOption configures a Client.
type ClientOption func(*ClientConfig) error

func defaultClientConfig() ClientConfig {
	return ClientConfig{ReadLimit: 16 << 20, WriteTimeout: 10 * time.Second}
}

// WithNotificationHandler receives server notifications (see
// ClientConfig.OnNotification).
func WithNotificationHandler(f func(method string, params json.RawMessage)) ClientOption {
	return func(c *ClientConfig) error { c.OnNotification = f; return nil }
}

// WithRequestHandler serves server-initiated requests (see
// ClientConfig.OnRequest).
func WithRequestHandler(f func(ctx context.Context, method string, params json.RawMessage) (any, error)) ClientOption {
	return func(c *ClientConfig) error { c.OnRequest = f; return nil }
}

// WithReadLimit bounds one message from the server.
func WithReadLimit(n int64) ClientOption {
	return func(c *ClientConfig) error {
		if n < 512 {
			return errors.New("read limit must be at least 512 bytes")
		}
		c.ReadLimit = n
		return nil
	}
}

// WithHTTPHeader adds headers to the WebSocket handshake (an Origin, an
// Authorization header for a relay behind a proxy).
func WithHTTPHeader(h http.Header) ClientOption {
	return func(c *ClientConfig) error { c.HTTPHeader = h.Clone(); return nil }
}

// WithClientID sets the clientId Dial initializes with (seed 001's
// BUB_AGENT_ID, for example). While a connection holds an id, the server
// refuses it to others.
func WithClientID(id string) ClientOption {
	return func(c *ClientConfig) error {
		if id == "" || len(id) > maxClientID {
			return fmt.Errorf("client id must be 1 to %d bytes", maxClientID)
		}
		c.ClientID = id
		return nil
	}
}

// WithClientInfo sets initialize's clientInfo; its Name must not be empty.
func WithClientInfo(info ClientInfo) ClientOption {
	return func(c *ClientConfig) error {
		if info.Name == "" {
			return errors.New("client info needs a name")
		}
		c.ClientInfo = info
		return nil
	}
}

// WithTLSConfig sets the TLS configuration of wss:// connections.
func WithTLSConfig(cfg *tls.Config) ClientOption {
	return func(c *ClientConfig) error { c.TLSConfig = cfg.Clone(); return nil }
}

// WithoutInitialize makes Dial skip initialize (see
// ClientConfig.NoInitialize).
func WithoutInitialize() ClientOption {
	return func(c *ClientConfig) error { c.NoInitialize = true; return nil }
}
