package dht

import (
	"fmt"
	"log/slog"
	"time"

	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
)

// ProtocolPrefix is the DHT protocol prefix of the mesh.
const ProtocolPrefix = "/meshagent"

// DefaultProviderTTL is how long a provider record lives without being
// re-provided.
const DefaultProviderTTL = 24 * time.Hour

// config is a Directory's configuration. New builds it in three steps, as
// kad-dht does: defaultConfig, then apply the options in order (they only
// set fields), then validate, which fills the defaults that depend on
// other settings and checks the whole, so every check is in one place.
type config struct {
	bootstrap []peer.AddrInfo
	ttl       time.Duration
	reprovide time.Duration // 0: half of ttl
	logger    *slog.Logger
	kadOpts   []kaddht.Option
	reg       prometheus.Registerer // nil: no metrics
	// advertisers is how many subscribers of a topic advertise it.
	advertisers int
	// spread is the span over which a topic's Advertise is delayed.
	spread time.Duration
}

func defaultConfig() config {
	return config{ttl: DefaultProviderTTL, logger: slog.Default(), advertisers: TopicAdvertisers, spread: AdvertiseSpread}
}

// apply applies opts in order, skipping nil ones.
func (c *config) apply(opts ...Option) error {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return err
		}
	}
	return nil
}

// validate fills the re-provide interval when none was set and checks the
// configuration as a whole.
func (c *config) validate() error {
	if c.reprovide == 0 {
		c.reprovide = c.ttl / 2
	}
	switch {
	case c.ttl <= 0:
		return fmt.Errorf("%w: provider TTL %v is not positive", ErrInvalidConfig, c.ttl)
	case c.reprovide < 0:
		return fmt.Errorf("%w: re-provide interval %v is negative", ErrInvalidConfig, c.reprovide)
	case c.reprovide >= c.ttl:
		return fmt.Errorf("%w: re-provide interval %v must be shorter than provider TTL %v", ErrInvalidConfig, c.reprovide, c.ttl)
	case c.logger == nil:
		return fmt.Errorf("%w: nil logger", ErrInvalidConfig)
	case c.advertisers < 1:
		return fmt.Errorf("%w: topic advertisers %d below 1", ErrInvalidConfig, c.advertisers)
	case c.spread < 0:
		return fmt.Errorf("%w: advertise spread %v is negative", ErrInvalidConfig, c.spread)
	}
	return nil
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
		c.ttl = d
		return nil
	}
}

// WithReprovideInterval sets how often the advertised keys are provided
// again. It must be shorter than the provider TTL; the default (or 0) is
// half of it.
func WithReprovideInterval(d time.Duration) Option {
	return func(c *config) error {
		c.reprovide = d
		return nil
	}
}

// WithLogger sets the logger; the default is slog.Default(). A nil logger
// is refused.
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

// WithMetrics records provides and provider lookups
// (meshagent_dht_lookups_total, meshagent_dht_lookup_seconds) in reg. One
// directory per registry.
func WithMetrics(reg prometheus.Registerer) Option {
	return func(c *config) error { c.reg = reg; return nil }
}

// WithTopicAdvertisers sets how many subscribers of one topic namespace
// advertise it at a time (default TopicAdvertisers; see TopicDiscovery).
func WithTopicAdvertisers(n int) Option {
	return func(c *config) error { c.advertisers = n; return nil }
}

// WithAdvertiseSpread sets the span over which a topic subscriber delays
// its advertisement (default AdvertiseSpread; 0 advertises at once; see
// TopicDiscovery's Advertise).
func WithAdvertiseSpread(d time.Duration) Option {
	return func(c *config) error { c.spread = d; return nil }
}
