package scale

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p"
	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/dht"
	"github.com/meshagent/meshagent/internal/meshtest"
)

// rawCluster is N plain libp2p hosts running kad-dht and GossipSub with
// their defaults (GossipSub signing its messages), the baseline.
type rawCluster struct {
	hosts  []host.Host
	kads   []*kaddht.IpfsDHT
	topics []*libp2ppubsub.Topic
	prov   int
	key    cid.Cid
	rep    *gossipReporter
	kind   *kindTracer
	ctx    context.Context
	wg     sync.WaitGroup // the subscribers' readers
}

func startRaw(t *testing.T, rng *rand.Rand, n int, provideBound time.Duration) *rawCluster {
	ctx, cancel := context.WithCancel(context.Background())
	c := &rawCluster{prov: n - 1, key: dht.CapabilityKey(probe), rep: newGossipReporter(), kind: newKindTracer(), ctx: ctx}
	t.Cleanup(func() {
		cancel()
		c.wg.Wait()
		for _, tp := range c.topics {
			_ = tp.Close()
		}
		for _, k := range c.kads {
			_ = k.Close()
		}
		for _, h := range c.hosts {
			_ = h.Close()
		}
	})
	for i, boot := range sparse(rng, n) {
		h, err := libp2p.New(libp2p.Identity(meshtest.Key(t, 5000+i)), libp2p.ListenAddrs(meshtest.Loopback), libp2p.BandwidthReporter(c.rep))
		if err != nil {
			t.Fatal(err)
		}
		c.hosts = append(c.hosts, h)
		var infos []peer.AddrInfo
		for _, j := range boot {
			infos = append(infos, peer.AddrInfo{ID: c.hosts[j].ID(), Addrs: c.hosts[j].Addrs()})
		}
		for _, ai := range infos {
			if err := h.Connect(ctx, ai); err != nil {
				t.Fatalf("raw %d: connect: %v", i, err)
			}
		}
		k, err := kaddht.New(h, kaddht.ProtocolPrefix("/scale-raw"), kaddht.Mode(kaddht.ModeServer), kaddht.BootstrapPeers(infos...))
		if err != nil {
			t.Fatal(err)
		}
		c.kads = append(c.kads, k)
		_ = k.Bootstrap(ctx)
		ps, err := libp2ppubsub.NewGossipSub(ctx, h, libp2ppubsub.WithRawTracer(c.kind))
		if err != nil {
			t.Fatal(err)
		}
		tp, err := ps.Join(probeTopic)
		if err != nil {
			t.Fatal(err)
		}
		c.topics = append(c.topics, tp)
	}
	// The provider provides as the mesh's directory does: at once, and
	// again after a failure (an empty routing table while joining).
	go func() {
		pctx, pcancel := context.WithTimeout(ctx, provideBound)
		defer pcancel()
		for pctx.Err() == nil {
			if c.kads[c.prov].Provide(pctx, c.key, true) == nil {
				return
			}
			select {
			case <-pctx.Done():
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return c
}

func (c *rawCluster) size() int                 { return len(c.hosts) }
func (c *rawCluster) provider() int             { return c.prov }
func (c *rawCluster) reporter() *gossipReporter { return c.rep }
func (c *rawCluster) kinds() *kindTracer        { return c.kind }

func (c *rawCluster) find(ctx context.Context, i int) (bool, error) {
	want := c.hosts[c.prov].ID()
	// Every provider, as the mesh's directory asks: a limit of one would
	// stop at a cached record and time no lookup.
	for ai := range c.kads[i].FindProvidersAsync(ctx, c.key, 0) {
		if ai.ID == want {
			return c.hosts[i].Connect(ctx, ai) == nil, nil
		}
	}
	return false, nil
}

func (c *rawCluster) subscribe(i int, got func([]byte)) error {
	sub, err := c.topics[i].Subscribe()
	if err != nil {
		return err
	}
	c.wg.Go(func() { // ends with the cluster's context
		for {
			m, err := sub.Next(c.ctx)
			if err != nil {
				return
			}
			got(m.Data)
		}
	})
	return nil
}

func (c *rawCluster) publish(ctx context.Context, from int, payload []byte) error {
	return c.topics[from].Publish(ctx, payload)
}
