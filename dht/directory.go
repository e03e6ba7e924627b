package dht

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p-kad-dht/records"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
)

// Directory is the capability directory of one agent.
type Directory struct {
	h     host.Host
	kad   *kaddht.IpfsDHT
	log   *slog.Logger
	met   *dhtMetrics // nil: none
	every time.Duration
	// advertisers is how many subscribers of a topic advertise it.
	advertisers int
	// spread is the span over which a topic's Advertise is delayed.
	spread time.Duration
	ctx    context.Context
	cancel context.CancelFunc
	kick   chan struct{}
	done   chan struct{}

	mu     sync.Mutex
	keys   []cid.Cid                   // advertised keys
	topics map[context.Context]cid.Cid // topic keys, while their advertiser's context lives

	closeOnce sync.Once
	closeErr  error
}

// New starts a directory on h. The caller keeps ownership of h.
func New(h host.Host, opts ...Option) (*Directory, error) {
	if h == nil {
		return nil, fmt.Errorf("%w: nil host", ErrInvalidConfig)
	}
	cfg := defaultConfig()
	if err := cfg.apply(opts...); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var met *dhtMetrics
	if cfg.reg != nil {
		var err error
		if met, err = newDHTMetrics(cfg.reg); err != nil {
			return nil, fmt.Errorf("dht: %w", err)
		}
	}
	kopts := []kaddht.Option{
		kaddht.ProtocolPrefix(ProtocolPrefix),
		kaddht.Mode(kaddht.ModeServer),
		kaddht.ProviderManagerOpts(
			records.ProvideValidity(cfg.ttl),
			records.ProviderAddrTTL(cfg.ttl),
			records.CleanupInterval(cfg.ttl),
		),
	}
	if len(cfg.bootstrap) > 0 {
		kopts = append(kopts, kaddht.BootstrapPeers(cfg.bootstrap...))
	}
	kopts = append(kopts, cfg.kadOpts...)
	kad, err := kaddht.New(h, kopts...)
	if err != nil {
		return nil, fmt.Errorf("dht: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Directory{
		h:           h,
		kad:         kad,
		log:         cfg.logger,
		met:         met,
		every:       cfg.reprovide,
		advertisers: cfg.advertisers,
		spread:      cfg.spread,
		ctx:         ctx,
		cancel:      cancel,
		kick:        make(chan struct{}, 1),
		done:        make(chan struct{}),
		topics:      map[context.Context]cid.Cid{},
	}
	go d.provideLoop()
	return d, nil
}

// Kad returns the underlying kad-dht, for routing uses beyond the directory.
func (d *Directory) Kad() *kaddht.IpfsDHT { return d.kad }

// Bootstrap connects to the bootstrap peers and fills the routing table.
func (d *Directory) Bootstrap(ctx context.Context) error {
	return d.kad.Bootstrap(ctx)
}

// Advertise replaces the advertised capability set. Its keys are provided
// at once (in the background), again whenever the routing table has
// doubled since (see provideLoop), and every re-provide interval; keys no
// longer in the set are not re-provided and expire.
func (d *Directory) Advertise(caps []protocol.Capability) {
	set := keysOf(caps)
	keys := make([]cid.Cid, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	d.mu.Lock()
	d.keys = keys
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// FindProviders streams the peers with provider records for a capability
// name (or a keyword), as they are found, deduplicated and without self.
// The channel closes when the lookup ends or ctx is done. Results are
// unconfirmed hints; see Find.
func (d *Directory) FindProviders(ctx context.Context, query string, byKeyword bool) <-chan peer.AddrInfo {
	k := CapabilityKey(query)
	if byKeyword {
		k = KeywordKey(query)
	}
	return d.findKey(ctx, k, 0)
}

// findKey streams up to limit (0: all) providers of k, deduplicated and
// without self.
func (d *Directory) findKey(ctx context.Context, k cid.Cid, limit int) <-chan peer.AddrInfo {
	out := make(chan peer.AddrInfo)
	start := time.Now()
	in := d.kad.FindProvidersAsync(ctx, k, limit)
	go func() {
		defer close(out)
		seen := make(map[peer.ID]struct{})
		defer func() {
			outcome := outcomeSuccess
			if len(seen) == 0 {
				outcome = outcomeNotFound
			}
			d.met.observe(opFindProviders, outcome, start)
		}()
		for p := range in {
			if p.ID == d.h.ID() {
				continue
			}
			if _, ok := seen[p.ID]; ok {
				continue
			}
			seen[p.ID] = struct{}{}
			select {
			case out <- p:
			case <-ctx.Done():
				for range in { // let the lookup goroutine finish
				}
				return
			}
		}
	}()
	return out
}

// Result is a confirmed provider.
type Result struct {
	// Peer is the provider, with the addresses the lookup found.
	Peer peer.AddrInfo
	// Capabilities are the provider's confirmed capabilities that match
	// the query.
	Capabilities []protocol.Capability
}

// ConfirmFunc reads a provider's capabilities from a trusted source, such
// as its signed hello.
type ConfirmFunc func(ctx context.Context, p peer.AddrInfo) ([]protocol.Capability, error)

// Find is FindProviders followed by confirm on each provider, concurrently;
// a provider whose confirm fails or who confirms no matching capability is
// dropped. The channel closes once the lookup and every confirm are done.
func (d *Directory) Find(ctx context.Context, query string, byKeyword bool, confirm ConfirmFunc) <-chan Result {
	out := make(chan Result)
	provs := d.FindProviders(ctx, query, byKeyword)
	go func() {
		defer close(out)
		var wg sync.WaitGroup
		for p := range provs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				caps, err := confirm(ctx, p)
				if err != nil {
					d.log.Debug("dht: provider not confirmed", "peer", p.ID, "err", err)
					return
				}
				var match []protocol.Capability
				for _, c := range caps {
					if matches(c, query, byKeyword) {
						match = append(match, c)
					}
				}
				if len(match) == 0 {
					d.log.Debug("dht: provider does not confirm the query", "peer", p.ID, "query", query)
					return
				}
				select {
				case out <- Result{Peer: p, Capabilities: match}:
				case <-ctx.Done():
				}
			}()
		}
		wg.Wait()
	}()
	return out
}

// Close stops re-providing and closes the DHT. It does not close the host.
func (d *Directory) Close() error {
	d.closeOnce.Do(func() {
		d.cancel()
		<-d.done
		d.closeErr = d.kad.Close()
	})
	return d.closeErr
}
