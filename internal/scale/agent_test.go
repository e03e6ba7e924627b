package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p"
	kaddht "github.com/libp2p/go-libp2p-kad-dht"
	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/routing"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/dht"
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

// agent is one node of either kind, built the same way whether the run
// holds N of them in the test process or each is a process of its own.
type agent interface {
	info() peer.AddrInfo
	// id is what find is given to recognise this agent as the provider.
	id() string
	// find looks the provider (want, its id) up and reaches it: the
	// mesh's signed hello, a raw connect.
	find(ctx context.Context, want string) (bool, error)
	// subscribe calls got with the payload of every message received on
	// the probe topic and the time it was received.
	subscribe(got func(data []byte, at time.Time)) error
	publish(ctx context.Context, payload []byte) error
}

// meshAgent is an agent with the DHT and topics on, as the product runs.
type meshAgent struct{ nd *node.Node }

// newMeshAgent starts agent i, bootstrapped to boot and offering the
// probe when provider. With join it then waits until it is connected to
// every bootstrap peer (as the raw baseline is before the next starts, so
// that both kinds start from the same sparse graph) and returns the agent
// with an error when it was not within joinBound. With h (a mocknet host
// with the agent's key) the node runs on it; without, on loopback TCP.
// extra are further node options (the network's connection limits).
func newMeshAgent(t testing.TB, i int, h host.Host, boot []peer.AddrInfo, provider, join bool, rep *gossipReporter, kt *kindTracer, extra ...node.Option) (*meshAgent, error) {
	opts := []node.Option{node.WithDHT(true), node.WithPubSubOptions(pubsub.WithRawTracer(kt))}
	opts = append(opts, extra...)
	if h != nil {
		opts = append(opts, node.WithHost(h))
	} else {
		opts = append(opts, node.WithHostOptions(libp2p.BandwidthReporter(rep)))
	}
	var addrs []ma.Multiaddr
	for _, ai := range boot {
		p2p, err := peer.AddrInfoToP2pAddrs(&ai)
		if err != nil {
			t.Fatalf("mesh %d: bootstrap %s: %v", i, ai.ID, err)
		}
		addrs = append(addrs, p2p...)
	}
	if len(addrs) > 0 {
		opts = append(opts, node.WithBootstrap(addrs...))
	}
	if provider {
		svc := node.Service{Capability: protocol.Capability{Name: probe, Description: "the capability the scale harness discovers"}, Handler: node.EchoHandler()}
		opts = append(opts, node.WithServices(svc))
	}
	a := &meshAgent{nd: meshtest.Node(t, 1000+i, opts...)}
	if !join {
		return a, nil
	}
	for _, ai := range boot {
		if err := wait.Until(joinBound, func() error {
			if a.nd.Host().Network().Connectedness(ai.ID) != network.Connected {
				return fmt.Errorf("node %d is not connected to its bootstrap peer %s", i, ai.ID)
			}
			return nil
		}); err != nil {
			return a, err
		}
	}
	return a, nil
}

func (a *meshAgent) info() peer.AddrInfo {
	return peer.AddrInfo{ID: a.nd.ID(), Addrs: a.nd.Host().Addrs()}
}

func (a *meshAgent) id() string { return a.nd.AgentID() }

func (a *meshAgent) find(ctx context.Context, want string) (bool, error) {
	ch, err := a.nd.Discover(ctx, probe, false)
	if err != nil {
		return false, err
	}
	// The first confirmed provider ends the search, as for raw: the
	// caller cancels ctx, which ends the lookup and the channel.
	for pi := range ch {
		if pi.AgentID == want {
			return true, nil
		}
	}
	return false, nil
}

func (a *meshAgent) subscribe(got func([]byte, time.Time)) error {
	_, err := a.nd.Subscribe(probePattern, func(m protocol.TopicMessage) { got(m.Payload, time.Now()) })
	return err
}

func (a *meshAgent) publish(ctx context.Context, payload []byte) error {
	_, err := a.nd.Publish(ctx, probeTopic, json.RawMessage(payload), nil)
	return err
}

// rawAgent is a plain libp2p host running kad-dht and GossipSub with
// their defaults (GossipSub signing its messages), the baseline.
type rawAgent struct {
	h      host.Host
	kad    *kaddht.IpfsDHT
	topic  *libp2ppubsub.Topic
	key    cid.Cid
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup // the subscriber's reader and the provider's provides
}

// newRawAgent starts host i, connected to boot before its DHT starts, and
// closes it at the end of the test. The provider provides as the mesh's
// directory does: at once, and again after a failure (an empty routing
// table while joining), for at most provideBound. The provider is the
// last agent started, so this is once every agent runs. With h (a
// mocknet host with key meshtest.Key(5000+i)) it runs on h; without, it
// builds a host on loopback TCP.
func newRawAgent(t testing.TB, i int, h host.Host, boot []peer.AddrInfo, provider bool, provideBound time.Duration, rep *gossipReporter, kt *kindTracer) *rawAgent {
	ctx, cancel := context.WithCancel(context.Background())
	a := &rawAgent{key: dht.CapabilityKey(probe), ctx: ctx, cancel: cancel}
	t.Cleanup(a.close)
	if h == nil {
		var err error
		if h, err = libp2p.New(libp2p.Identity(meshtest.Key(t, 5000+i)), libp2p.ListenAddrs(meshtest.Loopback), libp2p.BandwidthReporter(rep)); err != nil {
			t.Fatal(err)
		}
	}
	a.h = h
	var err error
	for _, ai := range boot {
		if err := h.Connect(ctx, ai); err != nil {
			t.Fatalf("raw %d: connect: %v", i, err)
		}
	}
	if a.kad, err = kaddht.New(h, kaddht.ProtocolPrefix("/scale-raw"), kaddht.Mode(kaddht.ModeServer), kaddht.BootstrapPeers(boot...)); err != nil {
		t.Fatal(err)
	}
	_ = a.kad.Bootstrap(ctx)
	ps, err := libp2ppubsub.NewGossipSub(ctx, h, libp2ppubsub.WithRawTracer(kt))
	if err != nil {
		t.Fatal(err)
	}
	if a.topic, err = ps.Join(probeTopic); err != nil {
		t.Fatal(err)
	}
	if provider {
		a.wg.Go(func() { a.provide(provideBound) })
	}
	return a
}

func (a *rawAgent) provide(bound time.Duration) {
	ctx, cancel := context.WithTimeout(a.ctx, bound)
	defer cancel()
	for ctx.Err() == nil {
		if a.kad.Provide(ctx, a.key, true) == nil {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (a *rawAgent) close() {
	a.cancel()
	a.wg.Wait()
	if a.topic != nil {
		_ = a.topic.Close()
	}
	if a.kad != nil {
		_ = a.kad.Close()
	}
	if a.h != nil {
		_ = a.h.Close()
	}
}

func (a *rawAgent) info() peer.AddrInfo { return peer.AddrInfo{ID: a.h.ID(), Addrs: a.h.Addrs()} }

func (a *rawAgent) id() string { return a.h.ID().String() }

func (a *rawAgent) find(ctx context.Context, want string) (bool, error) {
	// Every provider, as the mesh's directory asks: a limit of one would
	// stop at a cached record and time no lookup.
	for ai := range a.kad.FindProvidersAsync(ctx, a.key, 0) {
		if ai.ID.String() == want {
			return a.h.Connect(ctx, ai) == nil, nil
		}
	}
	return false, nil
}

func (a *rawAgent) subscribe(got func([]byte, time.Time)) error {
	sub, err := a.topic.Subscribe()
	if err != nil {
		return err
	}
	a.wg.Go(func() { // ends with the agent's context
		for {
			m, err := sub.Next(a.ctx)
			if err != nil {
				return
			}
			got(m.Data, time.Now())
		}
	})
	return nil
}

func (a *rawAgent) publish(ctx context.Context, payload []byte) error {
	return a.topic.Publish(ctx, payload)
}

// findCounted runs a's find and counts the peers its DHT lookup sent a
// query to (kad-dht's SendingQuery events on the lookup's context).
func findCounted(ctx context.Context, a agent, want string) (bool, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	ctx, events := routing.RegisterForQueryEvents(ctx)
	counted := make(chan int)
	go func() {
		n := 0
		for ev := range events {
			if ev.Type == routing.SendingQuery {
				n++
			}
		}
		counted <- n
	}()
	ok, err := a.find(ctx, want)
	cancel() // closes events
	return ok, <-counted, err
}
