package scale

import (
	"context"
	"math/rand/v2"
	"runtime/metrics"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
)

// localCluster is N agents of one kind in the test process, sharing one
// bandwidth reporter and one kind tracer.
type localCluster struct {
	name    string
	agents  []agent
	prov    int
	rep     *gossipReporter
	kt      *kindTracer
	base    uint64 // heap and stacks before the agents started
	baseRSS uint64
	// mem is the in-memory network the agents run on (mocknet or the
	// simulated packet network); nil: loopback.
	mem memNet
}

// memNet is an in-memory network that hands out agents' hosts: mocknet
// (mockNet) or the simulated packet network (simNet).
type memNet interface {
	host(k crypto.PrivKey, i int) (host.Host, error)
	// meshOptions are the node options a mesh agent on the network
	// takes besides its host (its connection limits).
	meshOptions() []node.Option
}

// newLocalCluster returns an empty cluster; with mem its agents run on
// that in-memory network (created before the baseline is taken, so that
// its links count in the memory figures).
func newLocalCluster(kind string, n int, mem memNet) *localCluster {
	return &localCluster{name: kind, prov: n - 1, rep: newGossipReporter(), kt: newKindTracer(), base: heapAndStacks(), baseRSS: rssBytes(), mem: mem}
}

// memHost returns agent i's host on the in-memory network with key k, or
// nil on loopback (the agent builds its own).
func (c *localCluster) memHost(t *testing.T, i int, k crypto.PrivKey) host.Host {
	if c.mem == nil {
		return nil
	}
	h, err := c.mem.host(k, i)
	if err != nil {
		t.Fatalf("N=%d: %v", len(c.agents), err)
	}
	return h
}

// bootInfos returns the addresses of the agents boot names.
func bootInfos(agents []agent, boot []int) []peer.AddrInfo {
	var infos []peer.AddrInfo
	for _, j := range boot {
		infos = append(infos, agents[j].info())
	}
	return infos
}

func startMesh(t *testing.T, rng *rand.Rand, n, join int, mem memNet) *localCluster {
	c := newLocalCluster(KindMesh, n, mem)
	c.agents = make([]agent, n)
	// A node that cannot connect to its bootstrap peers within joinBound
	// is left to its own retries, and the batches after it start without
	// waiting: the figures then say what such a mesh does.
	var overloaded atomic.Bool
	var extra []node.Option
	if mem != nil {
		extra = mem.meshOptions()
	}
	boot := sparse(rng, n, join)
	hosts := make([]host.Host, n)
	startInBatches(n, join, func(i int) {
		hosts[i] = c.memHost(t, i, meshtest.Key(t, 1000+i))
	}, func(i int) {
		a, err := newMeshAgent(t, i, hosts[i], bootInfos(c.agents, boot[i]), i == c.prov, !overloaded.Load(), c.rep, c.kt, extra...)
		if err != nil {
			t.Logf("N=%d: %v; the nodes after it start without waiting", n, err)
			overloaded.Store(true)
		}
		c.agents[i] = a
	}, c.afterBatch(t, n))
	return c
}

func startRaw(t *testing.T, rng *rand.Rand, n, join int, provideBound time.Duration, mem memNet) *localCluster {
	c := newLocalCluster(KindRaw, n, mem)
	c.agents = make([]agent, n)
	boot := sparse(rng, n, join)
	hosts := make([]host.Host, n)
	startInBatches(n, join, func(i int) {
		hosts[i] = c.memHost(t, i, meshtest.Key(t, 5000+i))
	}, func(i int) {
		c.agents[i] = newRawAgent(t, i, hosts[i], bootInfos(c.agents, boot[i]), i == c.prov, provideBound, c.rep, c.kt)
	}, c.afterBatch(t, n))
	return c
}

// afterBatch returns what startInBatches calls after each batch of a
// cluster of n: at each tenth of n it logs the time since the start
// (virtual in a synctest bubble), the process's CPU, live heap, resident
// memory and goroutines, which say whether a large start will fit before
// it ends; and before the next batch it waits -scale.joingap, so that
// agents arrive at a pace rather than all within a few seconds.
func (c *localCluster) afterBatch(t *testing.T, n int) func(k int) {
	begin, cpu0, tenth, batches := time.Now(), cpuTime(), 0, 0
	return func(k int) {
		if k*10/n != tenth || k == n {
			tenth = k * 10 / n
			s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/sched/goroutines:goroutines"}}
			metrics.Read(s)
			t.Logf("%s N=%d: %d started after %s (CPU %s): live heap %.2f GiB, resident %.2f GiB, %d goroutines",
				c.name, n, k, time.Since(begin).Round(time.Millisecond), (cpuTime() - cpu0).Round(time.Second),
				float64(s[0].Value.Uint64())/(1<<30), float64(rssBytes())/(1<<30), s[1].Value.Uint64())
		}
		if k < n-1 && *joinGap > 0 {
			// Batches arrive on a schedule, one every joinGap: a rate, whose
			// timer is virtual in a bubble.
			batches++
			<-time.After(time.Until(begin.Add(time.Duration(batches) * *joinGap)))
		}
	}
}

func (c *localCluster) kind() string  { return c.name }
func (c *localCluster) size() int     { return len(c.agents) }
func (c *localCluster) provider() int { return c.prov }

// sent returns the GossipSub RPCs and bytes sent: the bandwidth
// reporter's on loopback, the tracer's on an in-memory network, whose
// hosts the harness builds without a reporter (the same bytes: the RPCs
// as written to the stream).
func (c *localCluster) sent() (msgs, bytes int64, _ error) {
	if c.mem != nil {
		m, b := c.kt.sent()
		return m, b, nil
	}
	m, b := c.rep.sent()
	return m, b, nil
}

func (c *localCluster) takeKinds() (map[string]int64, error) { return c.kt.take(), nil }

func (c *localCluster) find(ctx context.Context, i int) (bool, int, error) {
	return findCounted(ctx, c.agents[i], c.agents[c.prov].id())
}

func (c *localCluster) subscribe(i int, got func([]byte, time.Time)) error {
	return c.agents[i].subscribe(got)
}

func (c *localCluster) publish(ctx context.Context, from int, payload []byte) error {
	return c.agents[from].publish(ctx, payload)
}

// idle measures the process over the window: its CPU and the memory it
// gained since the agents started, divided by N, so that the runtime's
// fixed cost is shared by all of them.
func (c *localCluster) idle(window time.Duration) (cpuPercent, memMiB, rssMiB float64) {
	before := cpuTime()
	start := time.Now()
	<-time.After(window) // an idle window, not a wait for a condition
	n := float64(c.size())
	cpuPercent = 100 * float64(cpuTime()-before) / float64(time.Since(start)) / n
	memMiB = c.heapPerAgent() // after a collection, which the RSS then reflects
	rssMiB = float64(int64(rssBytes())-int64(c.baseRSS)) / n / (1 << 20)
	return cpuPercent, memMiB, rssMiB
}

// heapPerAgent is the heap and stacks the process gained since the
// agents started, after a collection, divided by N.
func (c *localCluster) heapPerAgent() float64 {
	return float64(int64(heapAndStacks())-int64(c.base)) / float64(c.size()) / (1 << 20)
}

// connsPerAgent returns the mean and the largest number of peers an
// agent is connected to: what its memory grows with (each connection
// with its transport's buffers), bounded by the connection manager; and
// the mean of those the manager may not trim: protected by any tag, by
// kad-dht's (its first two buckets), and the connections (more than the
// peers when a pair holds two).
func (c *localCluster) connsPerAgent() (mean float64, most int, protected, kbucket, conns float64) {
	total, prot, kb, cn := 0, 0, 0, 0
	for _, a := range c.agents {
		var h host.Host
		switch a := a.(type) {
		case *meshAgent:
			h = a.nd.Host()
		case *rawAgent:
			h = a.h
		default:
			continue
		}
		k := len(h.Network().Peers())
		total += k
		most = max(most, k)
		cn += len(h.Network().Conns())
		for _, p := range h.Network().Peers() {
			if h.ConnManager().IsProtected(p, "") {
				prot++
			}
			if h.ConnManager().IsProtected(p, "kbucket") {
				kb++
			}
		}
	}
	n := float64(max(len(c.agents), 1))
	return float64(total) / n, most, float64(prot) / n, float64(kb) / n, float64(cn) / n
}
