//go:build chaos && unix

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

const (
	partitionSide   = 3 // nodes per side
	partitionBefore = 3 * time.Second
	partitionFor    = 10 * time.Second
	partitionHeal   = 10 * time.Second // everything flows again within this of healing
	partitionAfter  = 20 * time.Second // how long the run goes on after healing, at most
	partitionCallTO = 2 * time.Second
	partitionWork   = 300 * time.Millisecond // how long one call's work takes
)

// partition is the switch every node's connection gater reads: while on,
// connections between the two sides are refused in both directions.
type partition struct {
	on   atomic.Bool
	mu   sync.RWMutex
	side map[peer.ID]int
}

func (p *partition) across(a, b peer.ID) bool {
	if !p.on.Load() {
		return false
	}
	p.mu.RLock()
	defer p.mu.RUnlock()
	sa, oka := p.side[a]
	sb, okb := p.side[b]
	return oka && okb && sa != sb
}

// gater is one node's view of the partition.
type gater struct {
	p    *partition
	self peer.ID
}

func (g *gater) InterceptPeerDial(p peer.ID) bool                 { return !g.p.across(g.self, p) }
func (g *gater) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return !g.p.across(g.self, p) }
func (g *gater) InterceptAccept(network.ConnMultiaddrs) bool      { return true }
func (g *gater) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return !g.p.across(g.self, p)
}
func (g *gater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }

// callRecord is one call attempt.
type callRecord struct {
	pair       string
	across     bool
	corrID     string
	start, end time.Time
	err        error
}

// TestChaosPartition: six in-process nodes, two sides of three, each
// bootstrapped to one node of each side. For 10 s every connection
// between the sides is refused and the existing ones are closed, while
// callers keep calling across the partition and within each side, and
// each side publishes on a topic both sides subscribe to. A caller whose
// call fails retries it with the same request id until it succeeds.
// During the partition calls across fail with an error, never a silent
// success; within a side they all succeed; every request id runs at most
// once and every success ran exactly once; within 10 s of healing, calls
// across succeed again and each side's topic messages reach the other.
//
// Here a retry is a new request (a fresh request id); see
// TestChaosPartitionSameID for retries under the same id.
func TestChaosPartition(t *testing.T) {
	partitionRun(t, "partition", false)
}

// TestChaosPartitionSameID is TestChaosPartition with each failed call
// retried under its own request id. A call the partition cut after its
// handler ran is then sent again with that id: the provider must not run
// it again, and the retry gets the one result.
func TestChaosPartitionSameID(t *testing.T) {
	partitionRun(t, "partition-same-id", true)
}

// partitionRun runs the partition scenario; sameID makes a caller retry a
// failed call under the same request id instead of a fresh one.
func partitionRun(t *testing.T, scenario string, sameID bool) {
	part := &partition{side: map[peer.ID]int{}}
	var (
		runsMu sync.Mutex
		runs   = map[string]int{} // correlation id -> handler runs
	)
	// The work takes a while, so that the partition cuts calls whose
	// handler has run but whose answer has not come back: their callers
	// retry them with the same request id, which must not run again.
	work := node.HandlerFunc(func(ctx context.Context, c *node.Call) (json.RawMessage, error) {
		runsMu.Lock()
		runs[c.Request.CorrelationID]++
		runsMu.Unlock()
		select {
		case <-time.After(partitionWork):
		case <-ctx.Done():
		}
		return json.RawMessage(`{"done":true}`), nil
	})
	var nodes []*node.Node
	var seeds []ma.Multiaddr
	for i := range 2 * partitionSide {
		idx := 1200 + i
		id := meshtest.ID(t, idx)
		side := 0
		if i >= partitionSide {
			side = 1
		}
		part.mu.Lock()
		part.side[id] = side
		part.mu.Unlock()
		opts := []node.Option{
			node.WithHostOptions(libp2p.ConnectionGater(&gater{p: part, self: id})),
			node.WithServices(node.Service{Capability: protocol.Capability{Name: "work"}, Handler: work}),
			node.WithName(fmt.Sprintf("side%d-%d", side, i%partitionSide)),
		}
		if len(seeds) > 0 {
			opts = append(opts, node.WithBootstrap(seeds...))
		}
		n := meshtest.Node(t, idx, opts...)
		nodes = append(nodes, n)
		// Node 0 (side 0) and node 3 (side 1) are the seeds.
		if i == 0 || i == partitionSide {
			for _, a := range n.Host().Addrs() {
				seeds = append(seeds, a.Encapsulate(ma.StringCast("/p2p/"+n.ID().String())))
			}
		}
	}
	// Everyone starts connected to everyone (and greeted).
	for i, a := range nodes {
		for _, b := range nodes[i+1:] {
			meshtest.Connect(t, a, b)
		}
	}
	a0, a1, a2 := nodes[0], nodes[1], nodes[2]
	b0, b1, b2 := nodes[partitionSide], nodes[partitionSide+1], nodes[partitionSide+2]

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	var (
		recMu   sync.Mutex
		records []callRecord
	)
	done := make(chan struct{})
	var wg sync.WaitGroup
	caller := func(name string, from, to *node.Node, across bool) {
		defer wg.Done()
		for n := 0; ; n++ {
			corrID := fmt.Sprintf("%s-%d", name, n)
			for attempt := 0; ; attempt++ {
				if attempt > 0 && !sameID {
					corrID = fmt.Sprintf("%s-%d.%d", name, n, attempt)
				}
				select {
				case <-done:
					return
				default:
				}
				start := time.Now()
				cctx, ccancel := context.WithTimeout(ctx, partitionCallTO+time.Second)
				resp, err := from.Call(cctx, protocol.CallRequest{To: to.ID().String(), Action: "work", CorrelationID: corrID, Timeout: partitionCallTO})
				ccancel()
				if err == nil && resp.Status != protocol.StatusSuccess {
					err = fmt.Errorf("status %s", resp.Status)
				}
				recMu.Lock()
				records = append(records, callRecord{pair: name, across: across, corrID: corrID, start: start, end: time.Now(), err: err})
				recMu.Unlock()
				if err == nil {
					break
				}
				select {
				case <-done:
					return
				case <-time.After(100 * time.Millisecond): // the caller's own retry pace
				}
			}
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	wg.Add(4)
	go caller("a1-b1", a1, b1, true)
	go caller("b2-a2", b2, a2, true)
	go caller("a1-a2", a1, a2, false)
	go caller("b1-b2", b1, b2, false)

	// Topics: a subscriber on each side, a publisher on each side.
	type seen struct{ at, published time.Time }
	var (
		topicMu  sync.Mutex
		crossing = map[string][]seen{} // "a->b" / "b->a"
	)
	subscribe := func(n *node.Node, mySide string) {
		cancelSub, err := n.Subscribe("part:*", func(m protocol.TopicMessage) {
			var p struct {
				Side string    `json:"side"`
				At   time.Time `json:"at"`
			}
			if json.Unmarshal(m.Payload, &p) == nil && p.Side != mySide {
				topicMu.Lock()
				crossing[p.Side+"->"+mySide] = append(crossing[p.Side+"->"+mySide], seen{at: time.Now(), published: p.At})
				topicMu.Unlock()
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cancelSub)
	}
	subscribe(a2, "a")
	subscribe(b2, "b")
	publisher := func(n *node.Node, side string) {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			_, _ = n.Publish(pctx, "part:"+side, json.RawMessage(fmt.Sprintf(`{"side":%q,"at":%q}`, side, time.Now().Format(time.RFC3339Nano))), nil)
			pcancel()
		}
	}
	wg.Add(2)
	go publisher(a0, "a")
	go publisher(b0, "b")

	// Run, partition, heal.
	// The phases last fixed times: these are the scenario's clock, not
	// waits for the network.
	phase(ctx, partitionBefore)
	now := time.Now()
	part.on.Store(true)
	for _, x := range nodes {
		for _, y := range nodes {
			if part.across(x.ID(), y.ID()) {
				_ = x.Host().Network().ClosePeer(y.ID())
			}
		}
	}
	phase(ctx, partitionFor)
	healed := time.Now()
	part.on.Store(false)

	// Wait until each cross pair and each topic direction has recovered,
	// up to partitionAfter.
	recovered := func() (calls map[string]time.Duration, topics map[string]time.Duration) {
		calls, topics = map[string]time.Duration{}, map[string]time.Duration{}
		recMu.Lock()
		for _, r := range records {
			if r.across && r.err == nil && r.start.After(healed) {
				if _, ok := calls[r.pair]; !ok {
					calls[r.pair] = r.end.Sub(healed)
				}
			}
		}
		recMu.Unlock()
		topicMu.Lock()
		for dir, ss := range crossing {
			for _, s := range ss {
				if s.published.After(healed) {
					if _, ok := topics[dir]; !ok {
						topics[dir] = s.at.Sub(healed)
					}
				}
			}
		}
		topicMu.Unlock()
		return calls, topics
	}
	_ = wait.Until(partitionAfter, func() error {
		if c, tp := recovered(); len(c) < 2 || len(tp) < 2 {
			return fmt.Errorf("recovered: calls %v, topics %v", c, tp)
		}
		return nil
	})
	close(done)
	wg.Wait()
	calls, topics := recovered()

	// Check the record.
	recMu.Lock()
	defer recMu.Unlock()
	runsMu.Lock()
	defer runsMu.Unlock()
	var silentAcross, failedWithin, crossFailed, crossCalls int
	succeeded := map[string]bool{}
	for _, r := range records {
		during := r.start.After(now) && r.end.Before(healed)
		if r.across && during {
			crossCalls++
			if r.err == nil {
				silentAcross++
			} else {
				crossFailed++
			}
		}
		if !r.across && r.err != nil {
			failedWithin++
			t.Errorf("call %s within a side failed at %s: %v", r.corrID, r.start.Sub(now).Round(time.Millisecond), r.err)
		}
		if r.err == nil {
			succeeded[r.corrID] = true
		}
	}
	multi, lost, cut := 0, 0, 0
	for _, r := range records {
		if r.err != nil && runs[r.corrID] > 0 && r.start.Before(now) {
			cut++ // ran, but its caller saw an error
		}
	}
	for id, n := range runs {
		if n > 1 {
			multi++
			t.Errorf("request %s ran %d times", id, n)
		}
	}
	for id := range succeeded {
		if runs[id] != 1 {
			lost++
			t.Errorf("request %s answered success but ran %d times", id, runs[id])
		}
	}
	worst := func(m map[string]time.Duration, want int) string {
		if len(m) < want {
			return "never"
		}
		var w time.Duration
		for _, d := range m {
			w = max(w, d)
		}
		return w.Round(time.Millisecond).String()
	}
	figures(t, scenario, "%d+%d nodes, %s partition: %d calls across during it, %d failed with an error, %d silent successes; %d calls within a side failed; %d request ids (%d cut mid-call after running), %d ran more than once, %d successes not run exactly once; calls across back %s after healing, topics across %s",
		partitionSide, partitionSide, partitionFor, crossCalls, crossFailed, silentAcross, failedWithin, len(runs), cut, multi, lost, worst(calls, 2), worst(topics, 2))
	if crossCalls == 0 {
		t.Error("no call across the partition was attempted during it")
	}
	if silentAcross > 0 {
		t.Errorf("%d calls across the partition succeeded during it", silentAcross)
	}
	for _, pair := range []string{"a1-b1", "b2-a2"} {
		if d, ok := calls[pair]; !ok || d > partitionHeal {
			t.Errorf("calls %s not flowing within %s of healing (first success after %v, ok=%v)", pair, partitionHeal, d, ok)
		}
	}
	for _, dir := range []string{"a->b", "b->a"} {
		if d, ok := topics[dir]; !ok || d > partitionHeal {
			t.Errorf("topic messages %s not flowing within %s of healing (first after %v, ok=%v)", dir, partitionHeal, d, ok)
		}
	}
}

// phase lets a phase of a scenario run for d (or until ctx ends).
func phase(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}
