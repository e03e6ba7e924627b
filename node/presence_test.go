package node_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/pubsub"
)

// heartbeatTracer counts, by author, the distinct heartbeats a node's
// router sends (its own and forwarded ones, once each however many peers
// get it, or ask for it again) and delivers.
type heartbeatTracer struct {
	mu       sync.Mutex
	seen     map[string]bool // signatures sent
	sent     map[string]int
	received map[string]int
}

func newHeartbeatTracer() *heartbeatTracer {
	return &heartbeatTracer{seen: map[string]bool{}, sent: map[string]int{}, received: map[string]int{}}
}

// author returns the agent a presence message's signed envelope names.
func author(data []byte) string {
	const prefix = `{"from":{"agentId":"`
	if len(data) < 64 || !bytes.HasPrefix(data[64:], []byte(prefix)) {
		return ""
	}
	rest := data[64+len(prefix):]
	if i := bytes.IndexByte(rest, '"'); i > 0 {
		return string(rest[:i])
	}
	return ""
}

func isPresence(topic string) bool { return topic == pubsub.GossipTopic(protocol.PresenceFamily) }

func (t *heartbeatTracer) SendRPC(rpc *libp2ppubsub.RPC, _ peer.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range rpc.GetPublish() {
		d := m.GetData()
		if isPresence(m.GetTopic()) && len(d) >= 64 && !t.seen[string(d[:64])] {
			t.seen[string(d[:64])] = true
			t.sent[author(d)]++
		}
	}
}

func (t *heartbeatTracer) DeliverMessage(m *libp2ppubsub.Message) {
	if !isPresence(m.GetTopic()) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.received[author(m.GetData())]++
}

func (t *heartbeatTracer) counts(agent string) (sent, received int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.sent[agent], t.received[agent]
}

func (*heartbeatTracer) AddPeer(peer.ID, libp2pprotocol.ID)             {}
func (*heartbeatTracer) RemovePeer(peer.ID)                             {}
func (*heartbeatTracer) Join(string)                                    {}
func (*heartbeatTracer) Leave(string)                                   {}
func (*heartbeatTracer) Graft(peer.ID, string)                          {}
func (*heartbeatTracer) Prune(peer.ID, string)                          {}
func (*heartbeatTracer) ValidateMessage(*libp2ppubsub.Message)          {}
func (*heartbeatTracer) RejectMessage(*libp2ppubsub.Message, string)    {}
func (*heartbeatTracer) DuplicateMessage(*libp2ppubsub.Message)         {}
func (*heartbeatTracer) ThrottlePeer(peer.ID)                           {}
func (*heartbeatTracer) RecvRPC(*libp2ppubsub.RPC)                      {}
func (*heartbeatTracer) DropRPC(*libp2ppubsub.RPC, peer.ID)             {}
func (*heartbeatTracer) UndeliverableMessage(*libp2ppubsub.Message)     {}
func (*heartbeatTracer) OnNewOutboundStream(peer.ID, libp2pprotocol.ID) {}
func (*heartbeatTracer) OnClosedOutboundStream(peer.ID)                 {}

// TestNoHeartbeatForKnownAgent: a new connection between two agents that
// have heard each other's heartbeats for longer than an interval sends no
// heartbeat (each used to make both agents heartbeat to the whole mesh,
// over and over while a mesh formed its connections); a newcomer is still
// answered.
func TestNoHeartbeatForKnownAgent(t *testing.T) {
	const every = node.MaxHeartbeatInterval // no periodic heartbeat in the test
	var ahead atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	tr := newHeartbeatTracer()
	a := meshtest.Node(t, 1, node.WithPresence(node.Presence{Interval: every}), node.WithClock(clock),
		node.WithPubSubOptions(pubsub.WithRawTracer(tr)))
	b := meshtest.Node(t, 2, node.WithPresence(node.Presence{Interval: every}))
	c := meshtest.Node(t, 3, node.WithPresence(node.Presence{Interval: every}))
	meshtest.Connect(t, a, c)
	// b is a newcomer to a, and connected to c: a hears its heartbeat
	// through c, and answers it only when connected to b.
	meshtest.Connect(t, b, c)
	wait.For(t, 15*time.Second, func() error {
		if _, got := tr.counts(b.AgentID()); got == 0 {
			return fmt.Errorf("a has no heartbeat of b")
		}
		return nil
	})
	// Heartbeats a still owes its first peers (one a second at most) go
	// out before a meets b.
	last, changed := -1, time.Now()
	wait.For(t, 15*time.Second, func() error {
		if sent, _ := tr.counts(a.AgentID()); sent != last {
			last, changed = sent, time.Now()
		}
		if time.Since(changed) < 1500*time.Millisecond {
			return fmt.Errorf("a sent a heartbeat less than 1.5 s ago")
		}
		return nil
	})
	ahead.Store(int64(2 * every)) // a has heard b for longer than an interval
	before, _ := tr.counts(a.AgentID())
	// Connected, not waiting for hellos: with its clock ahead, a's hello
	// is out of b's replay window.
	if err := a.Host().Connect(meshtest.Context(t, 10*time.Second), peer.AddrInfo{ID: b.ID(), Addrs: b.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	// a looks for newcomers every 250 ms.
	wait.Holds(t, 2*time.Second, func() error {
		if sent, _ := tr.counts(a.AgentID()); sent != before {
			return fmt.Errorf("a sent %d heartbeats after connecting to b, which it had heard from for longer than an interval", sent-before)
		}
		return nil
	})
}

// TestHeartbeatIntervalGrowsWithTheMesh: an agent that knows of few
// agents announces its configured interval; one that knows of many more
// than PresenceAgents stretches it in proportion (so that a large mesh's
// heartbeats stay near a fixed rate), and a receiver judges it by the
// interval announced: fresh, neither stale nor dropped, between its
// stretched heartbeats.
func TestHeartbeatIntervalGrowsWithTheMesh(t *testing.T) {
	const (
		every = time.Second
		known = 300 // made-up agents a hears, besides b
		// a knows of known+2 agents with itself and b.
		stretched = every * (known + 2) / node.PresenceAgents
	)
	var ahead atomic.Int64
	clock := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	a := meshtest.Node(t, 1, node.WithPresence(node.Presence{Interval: every}))
	b := meshtest.Node(t, 2, node.WithPresence(node.Presence{Interval: every}), node.WithClock(clock))
	heard := announcedBy(t, a, b)
	heard(every)

	// The made-up agents announce the stretched interval too, as a
	// settled mesh's agents do, so that their median agrees.
	node.HearAgents(a, known, stretched)
	a.SetBusy(true) // a heartbeat at once
	heard(stretched)
	// b's presence records the heartbeat on a goroutine of its own.
	wait.For(t, 10*time.Second, func() error {
		if s := peerInfo(b, a.AgentID()).Status; s != protocol.StatusBusy {
			return fmt.Errorf("b shows a %q, want busy", s)
		}
		return nil
	})

	// Past DropAfter configured intervals, within StaleAfter stretched ones.
	age := every*node.DropAfter + every
	if age >= stretched*node.StaleAfter {
		t.Fatalf("the test's age %v is not within %d stretched intervals", age, node.StaleAfter)
	}
	ahead.Store(int64(age))
	if pi := peerInfo(b, a.AgentID()); pi.Status != protocol.StatusBusy {
		t.Fatalf("b shows a %q %v after its last heartbeat, which announced %v; want busy", pi.Status, age, stretched)
	}
}

// TestHeartbeatIntervalFollowsTheMesh: an agent that hears more than
// PresenceAgents agents keeps at least the median interval they announce,
// so that a newcomer to a large mesh (or each agent of a mesh started at
// once) sends at the mesh's pace before it has heard every agent; one
// that hears no more than PresenceAgents keeps its own count's interval.
func TestHeartbeatIntervalFollowsTheMesh(t *testing.T) {
	const (
		every    = time.Second
		meshPace = 5 * time.Minute // what the made-up agents announce
		// a knows of PresenceAgents+1 agents with itself.
		ownCount = every * (node.PresenceAgents + 1) / node.PresenceAgents
	)
	a := meshtest.Node(t, 1, node.WithPresence(node.Presence{Interval: every}))
	// b sends no heartbeats, so a holds only the made-up agents'.
	b := meshtest.Node(t, 2, node.WithPresence(node.Presence{Interval: 0}))
	heard := announcedBy(t, a, b)
	heard(every)

	// a holds PresenceAgents heartbeats, no more: its own count sets its
	// interval.
	node.HearAgents(a, node.PresenceAgents, meshPace)
	a.SetBusy(true)
	heard(ownCount)

	// One more: a holds PresenceAgents+1, all announcing the mesh's pace,
	// which a then keeps though its count says about a second.
	node.HearAgents(a, node.PresenceAgents+1, meshPace)
	a.SetBusy(false)
	heard(meshPace)
}

// TestNewcomerCountsItsNeighbours: a node counts the agents it is
// connected to on the presence topic as well as those it has heard, so a
// newcomer to a large mesh, which has heard few heartbeats (a large mesh
// sends about one a second), stretches its interval by its neighbours
// rather than sending at the configured pace; its first heartbeat waits
// a second or two after the start so that it has found them.
func TestNewcomerCountsItsNeighbours(t *testing.T) {
	const (
		every = time.Second
		quiet = node.PresenceAgents + 1 // neighbours that send no heartbeat
		// a counts quiet+1 agents with itself.
		stretched = every * (quiet + 1) / node.PresenceAgents
	)
	a := meshtest.Node(t, 1, node.WithPresence(node.Presence{Interval: every}))
	b := meshtest.Node(t, 2, node.WithPresence(node.Presence{Interval: 0}))
	heard := announcedBy(t, a, b)
	for i := range quiet - 1 {
		meshtest.Connect(t, a, meshtest.Node(t, 3+i, node.WithPresence(node.Presence{Interval: 0})))
	}
	heard(stretched)
}

// announcedBy subscribes b to a's heartbeats and returns a function that
// waits until one announcing want arrives.
func announcedBy(t *testing.T, a, b *node.Node) func(want time.Duration) {
	t.Helper()
	announced := make(chan time.Duration, 64) // the intervals of a's heartbeats, as b hears them
	cancel, err := b.Subscribe(protocol.PresenceTopic(a.AgentID()), func(m protocol.TopicMessage) {
		var hb protocol.Heartbeat
		if err := json.Unmarshal(m.Payload, &hb); err != nil {
			t.Errorf("a's heartbeat: %v", err)
			return
		}
		select {
		case announced <- time.Duration(hb.IntervalMS) * time.Millisecond:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	meshtest.Connect(t, a, b)
	return func(want time.Duration) {
		t.Helper()
		last := time.Duration(-1) // none yet
		wait.For(t, 15*time.Second, func() error {
			for {
				select {
				case got := <-announced:
					if got == want {
						return nil
					}
					last = got
				default:
					return fmt.Errorf("a's last heartbeat announced an interval of %v (-1ns: none heard), want %v", last, want)
				}
			}
		})
	}
}

// TestNewcomerAnsweredOnlyInASmallMesh: an agent answers a newcomer with
// a heartbeat (to the whole mesh) while it knows of up to 50 agents, and
// not in a larger mesh, where every join would cost every agent one
// heartbeat per neighbour of the newcomer. The newcomer still lists the
// agent, connected, with the capabilities of its hello.
func TestNewcomerAnsweredOnlyInASmallMesh(t *testing.T) {
	const every = node.MaxHeartbeatInterval // no periodic heartbeat in the test
	for _, tc := range []struct {
		name    string
		known   int // made-up agents a has heard
		answers bool
	}{
		{"small mesh", 0, true},
		{"large mesh", 300, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newHeartbeatTracer()
			// a's first heartbeat goes out before b connects, to nobody.
			a := meshtest.Node(t, 1, node.WithPresence(node.Presence{Interval: every}), node.WithPubSubOptions(pubsub.WithRawTracer(tr)), node.WithFirstHeartbeatAtOnce(),
				node.WithServices(node.Service{Capability: protocol.Capability{Name: "probe"}, Handler: node.EchoHandler()}))
			node.HearAgents(a, tc.known, node.MaxHeartbeatInterval)
			b := meshtest.Node(t, 2, node.WithPresence(node.Presence{Interval: every}))
			meshtest.Connect(t, a, b)
			// b's first heartbeat reaches a, which then sees b as a
			// newcomer both ways (a new topic peer, a first heartbeat).
			wait.For(t, 15*time.Second, func() error {
				if _, got := tr.counts(b.AgentID()); got == 0 {
					return fmt.Errorf("a has no heartbeat of b")
				}
				return nil
			})
			answered := func() error {
				if sent, _ := tr.counts(a.AgentID()); sent == 0 {
					return fmt.Errorf("a sent no heartbeat to newcomer b")
				}
				return nil
			}
			if tc.answers {
				wait.For(t, 15*time.Second, answered)
			} else {
				// a looks for newcomers every 250 ms and answers within a second.
				wait.Holds(t, 3*time.Second, func() error {
					if answered() == nil {
						return fmt.Errorf("a answered newcomer b in a mesh of %d agents", tc.known+2)
					}
					return nil
				})
			}
			var found bool
			for _, p := range b.Peers() {
				if p.AgentID == a.AgentID() {
					found = p.Connected && len(p.Capabilities) > 0
				}
			}
			if !found {
				t.Fatalf("b does not list a, connected, with its capabilities: %+v", b.Peers())
			}
		})
	}
}

// TestSetStatusReachesPeers: a declared status (busy, the bead worked on,
// how many beads the agent takes) reaches peers in a heartbeat sent at
// once, and a status that cannot be declared is refused and changes
// nothing.
func TestSetStatusReachesPeers(t *testing.T) {
	const every = node.MaxHeartbeatInterval // only the heartbeats SetStatus sends
	a := meshtest.Node(t, 1, node.WithPresence(node.Presence{Interval: every}))
	b := meshtest.Node(t, 2, node.WithPresence(node.Presence{Interval: every}))
	meshtest.Connect(t, a, b)
	want := protocol.AgentStatus{Status: protocol.StatusBusy, CurrentBead: "bd-42", MaxConcurrentBeads: 3}
	// The topic mesh forms after the connection: declare until b hears it.
	wait.For(t, 20*time.Second, func() error {
		if err := a.SetStatus(protocol.AgentStatus{Status: protocol.StatusAvailable}); err != nil {
			return err
		}
		if err := a.SetStatus(want); err != nil {
			return err
		}
		pi := peerInfo(b, a.AgentID())
		if pi.Status != want.Status || pi.CurrentBead != want.CurrentBead || pi.MaxConcurrentBeads != want.MaxConcurrentBeads {
			return fmt.Errorf("b shows a as %q %q %d", pi.Status, pi.CurrentBead, pi.MaxConcurrentBeads)
		}
		return nil
	})
	for _, bad := range []protocol.AgentStatus{
		{Status: "stale"}, {Status: ""}, {Status: protocol.StatusBusy, MaxConcurrentBeads: -1},
		{Status: protocol.StatusBusy, MaxConcurrentBeads: protocol.MaxConcurrentBeads + 1},
		{Status: protocol.StatusBusy, CurrentBead: strings.Repeat("b", protocol.MaxNameLen+1)},
	} {
		if err := a.SetStatus(bad); protocol.CodeOf(err) != protocol.CodeInvalidMessage {
			t.Errorf("SetStatus(%+v): %v, want INVALID_MESSAGE", bad, err)
		}
	}
	if got := a.DeclaredStatus(); got != want {
		t.Fatalf("declared %+v after refusals, want %+v", got, want)
	}
	if self := a.SelfInfo(); self.CurrentBead != "bd-42" || self.MaxConcurrentBeads != 3 || self.Status != protocol.StatusBusy {
		t.Fatalf("self info %+v", self)
	}
}

// TestNextHeartbeatWithinAnnouncedSpread: a heartbeat is never due later
// than the interval the last one announced (receivers would see the agent
// stale), and the due times of agents with one interval spread over its
// second half, so that agents started together do not stay in step.
func TestNextHeartbeatWithinAnnouncedSpread(t *testing.T) {
	for _, every := range []time.Duration{node.MinHeartbeatInterval, 10 * time.Second, node.MaxHeartbeatInterval} {
		lo, hi := every, time.Duration(0)
		for range 1000 {
			d := node.NextHeartbeat(every)
			if d < every/2 || d > every {
				t.Fatalf("NextHeartbeat(%v) = %v, want within [%v, %v]", every, d, every/2, every)
			}
			lo, hi = min(lo, d), max(hi, d)
		}
		if spread := hi - lo; spread < every*2/5 {
			t.Errorf("1,000 heartbeats due after %v spread over %v, want at least %v", every, spread, every*2/5)
		}
	}
}
