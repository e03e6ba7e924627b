package dht

import (
	"errors"
	"log/slog"
	"time"

	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/peer"
)

// ProtocolPrefix is the DHT protocol prefix of the mesh.
const ProtocolPrefix = "/meshagent"

// DefaultProviderTTL is how long a provider record lives without being
// re-provided.
const DefaultProviderTTL = 24 * time.Hour

type config struct {
	bootstrap []peer.AddrInfo
	ttl       time.Duration
	reprovide time.Duration
	logger    *slog.Logger
	kadOpts   []kaddht.Option
}

// Option configures a Directory.
type Option func(*config) error

// WithBootstrapPeers sets the peers the DHT joins through.
func WithBootstrapPeers(peers ...peer.AddrInfo) Option {
	return func(c *config) error {
		c.bootstrap = append(c.bootstrap, peers...)
		return nil
	}
}

// WithProviderTTL sets how long peers keep a provider record. All agents of
// a mesh must use the same value.
func WithProviderTTL(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errors.New("dht: provider TTL must be positive")
		}
		c.ttl = d
		return nil
	}
}

// WithReprovideInterval sets how often the advertised keys are provided
// again. It must be shorter than the provider TTL; the default is half of
// it.
func WithReprovideInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errors.New("dht: re-provide interval must be positive")
		}
		c.reprovide = d
		return nil
	}
}

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		c.logger = l
		return nil
	}
}

// WithKadOptions passes options to the underlying kad-dht; they are applied
// after the directory's own, so they win.
func WithKadOptions(opts ...kaddht.Option) Option {
	return func(c *config) error {
		c.kadOpts = append(c.kadOpts, opts...)
		return nil
	}
}
