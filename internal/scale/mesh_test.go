package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/network"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/pubsub"
)

// probe is the capability the provider offers and the others discover.
const probe = "scale-probe"

// probeTopic is the topic published to; subscribers use its family.
const probeTopic, probePattern = "scale:x", "scale:*"

// joinBound bounds the wait for a starting node's bootstrap connections.
const joinBound = 30 * time.Second

// meshCluster is N agents with the DHT and topics on, as the product runs.
type meshCluster struct {
	nodes []*node.Node
	prov  int
	rep   *gossipReporter
	kind  *kindTracer
}

func startMesh(t *testing.T, rng *rand.Rand, n int) *meshCluster {
	c := &meshCluster{prov: n - 1, rep: newGossipReporter(), kind: newKindTracer()}
	svc := node.Service{Capability: protocol.Capability{Name: probe, Description: "the capability the scale harness discovers"}, Handler: node.EchoHandler()}
	overloaded := false // a node did not join within joinBound
	for i, boot := range sparse(rng, n) {
		opts := []node.Option{node.WithDHT(true), node.WithHostOptions(libp2p.BandwidthReporter(c.rep)), node.WithPubSubOptions(pubsub.WithRawTracer(c.kind))}
		var addrs []ma.Multiaddr
		for _, j := range boot {
			addrs = append(addrs, c.nodes[j].Addrs()...)
		}
		if len(addrs) > 0 {
			opts = append(opts, node.WithBootstrap(addrs...))
		}
		if i == c.prov {
			opts = append(opts, node.WithServices(svc))
		}
		nd := meshtest.Node(t, 1000+i, opts...)
		// As the raw baseline does, each node is connected to its
		// bootstrap peers before the next starts: both kinds start from
		// the same sparse graph. A node that cannot connect within the
		// bound is left to its own retries, and the later ones are not
		// waited for: the figures then say what such a mesh does.
		for _, j := range boot {
			if overloaded {
				break
			}
			id := c.nodes[j].ID()
			if err := wait.Until(joinBound, func() error {
				if nd.Host().Network().Connectedness(id) != network.Connected {
					return fmt.Errorf("node %d is not connected to its bootstrap peer %d", i, j)
				}
				return nil
			}); err != nil {
				t.Logf("N=%d: %v; the nodes after it start without waiting", n, err)
				overloaded = true
			}
		}
		c.nodes = append(c.nodes, nd)
	}
	return c
}

func (c *meshCluster) size() int                 { return len(c.nodes) }
func (c *meshCluster) provider() int             { return c.prov }
func (c *meshCluster) reporter() *gossipReporter { return c.rep }
func (c *meshCluster) kinds() *kindTracer        { return c.kind }

func (c *meshCluster) find(ctx context.Context, i int) (bool, error) {
	ch, err := c.nodes[i].Discover(ctx, probe, false)
	if err != nil {
		return false, err
	}
	// The first confirmed provider ends the search, as for raw: the
	// caller cancels ctx, which ends the lookup and the channel.
	want := c.nodes[c.prov].AgentID()
	for pi := range ch {
		if pi.AgentID == want {
			return true, nil
		}
	}
	return false, nil
}

func (c *meshCluster) subscribe(i int, got func([]byte)) error {
	_, err := c.nodes[i].Subscribe(probePattern, func(m protocol.TopicMessage) { got(m.Payload) })
	return err
}

func (c *meshCluster) publish(ctx context.Context, from int, payload []byte) error {
	_, err := c.nodes[from].Publish(ctx, probeTopic, json.RawMessage(payload), nil)
	return err
}
