package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/pubsub"
)

// presence is what the node hears of other agents' heartbeats, under its
// own lock, and what it declares of itself.
type presence struct {
	// kick asks the presence loop for a heartbeat now.
	kick chan struct{}
	// heardNew tells the presence loop that a connected agent's first
	// heartbeat arrived (see presenceLoop).
	heardNew chan struct{}
	// declared is this agent's declared status (SetStatus, SetBusy).
	declared atomic.Pointer[protocol.AgentStatus]

	mu sync.Mutex
	m  map[peer.ID]*presenceState
}

func newPresence() *presence {
	return &presence{kick: make(chan struct{}, 1), heardNew: make(chan struct{}, 1), m: map[peer.ID]*presenceState{}}
}

// record keeps p's latest heartbeat, forgetting the oldest one when
// full, and reports whether it is the first heard from p.
func (pr *presence) record(p peer.ID, s *presenceState) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	prev, known := pr.m[p]
	s.first = s.at
	if known {
		s.first = prev.first
	}
	if !known && len(pr.m) >= maxKnownPeers {
		var oldest peer.ID
		var at time.Time
		for id, ps := range pr.m {
			if oldest == "" || ps.at.Before(at) {
				oldest, at = id, ps.at
			}
		}
		delete(pr.m, oldest)
	}
	pr.m[p] = s
	return !known
}

// heardSince reports whether p's heartbeats have been heard since before
// t (and are still held).
func (pr *presence) heardSince(p peer.ID, t time.Time) bool {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	ps, ok := pr.m[p]
	return ok && ps.first.Before(t)
}

// sweep forgets the heartbeats past DropAfter and returns their agents.
func (pr *presence) sweep(now time.Time) []peer.ID {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	var gone []peer.ID
	for id, p := range pr.m {
		if _, listed := p.staleness(now); !listed {
			delete(pr.m, id)
			gone = append(gone, id)
		}
	}
	return gone
}

// medianInterval returns the median of the intervals announced by the
// heartbeats held, or 0 when no more than atLeast are held.
func (pr *presence) medianInterval(atLeast int) time.Duration {
	pr.mu.Lock()
	if len(pr.m) <= atLeast {
		pr.mu.Unlock()
		return 0
	}
	intervals := make([]time.Duration, 0, len(pr.m))
	for _, p := range pr.m {
		intervals = append(intervals, p.interval)
	}
	pr.mu.Unlock()
	slices.Sort(intervals)
	return intervals[len(intervals)/2]
}

// count returns how many agents' heartbeats are held.
func (pr *presence) count() int {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return len(pr.m)
}

// get returns p's last heartbeat.
func (pr *presence) get(p peer.ID) (presenceState, bool) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	ps, ok := pr.m[p]
	if !ok {
		return presenceState{}, false
	}
	return *ps, true
}

// snapshot returns a copy of the heartbeats held.
func (pr *presence) snapshot() map[peer.ID]presenceState {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	out := make(map[peer.ID]presenceState, len(pr.m))
	for id, p := range pr.m {
		out[id] = *p
	}
	return out
}

// presenceState is the last heartbeat of another agent.
type presenceState struct {
	hb       protocol.Heartbeat
	at       time.Time     // when it arrived
	first    time.Time     // when the first of the agent's heartbeats held arrived
	interval time.Duration // the sender's interval, clamped
}

// staleness returns the status to show for a heartbeat received at
// p.at, and whether the agent should still be listed.
func (p *presenceState) staleness(now time.Time) (protocol.PresenceStatus, bool) {
	age := now.Sub(p.at)
	switch {
	case age > DropAfter*p.interval:
		return protocol.StatusStale, false
	case age > StaleAfter*p.interval:
		return protocol.StatusStale, true
	}
	return p.hb.Status, true
}

// capabilityDigest is Heartbeat.CapabilityDigest of a capability set.
func capabilityDigest(caps []protocol.Capability) string {
	sorted := slices.SortedFunc(slices.Values(caps), func(a, b protocol.Capability) int { return strings.Compare(a.Name, b.Name) })
	b, err := protocol.MarshalCanonical(sorted)
	if err != nil { // capabilities were validated as JSON when loaded
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func (n *Node) startPresence() error {
	// The bus cancels the subscription when it closes.
	if _, err := n.topics.Subscribe(protocol.PresenceFamily+":*", n.receiveHeartbeat); err != nil {
		return fmt.Errorf("node: presence: %w", err)
	}
	n.wg.Go(n.presenceLoop)
	return nil
}

// SetBusy declares the agent busy (seed 004's agent_busy: it started work
// and would rather not be given more) or available again. Peers see the
// change in the next heartbeat, which is sent at once. An agent whose
// request handlers are all taken (Limits.MaxConcurrent) is busy whatever
// it declared.
func (n *Node) SetBusy(busy bool) {
	s := n.DeclaredStatus()
	s.Status = protocol.StatusAvailable
	if busy {
		s.Status = protocol.StatusBusy
	}
	_ = n.SetStatus(s) // a valid status with the declared bead
}

// SetStatus declares the agent's status (seed 004's registry: available
// or busy, the bead it works on, how many beads it takes at once). Peers
// see a change in the next heartbeat, which is sent at once. An agent
// whose request handlers are all taken is busy whatever it declared. It
// returns an INVALID_MESSAGE error for a status it cannot declare.
func (n *Node) SetStatus(s protocol.AgentStatus) error {
	if err := s.Check(); err != nil {
		return err
	}
	if old := n.presence.declared.Swap(&s); old == nil || *old != s {
		n.kickPresence()
	}
	return nil
}

// DeclaredStatus returns what the agent declared with SetStatus or
// SetBusy (available, and nothing else, until it does).
func (n *Node) DeclaredStatus() protocol.AgentStatus {
	if s := n.presence.declared.Load(); s != nil {
		return *s
	}
	return protocol.AgentStatus{Status: protocol.StatusAvailable}
}

func (n *Node) kickPresence() {
	select {
	case n.presence.kick <- struct{}{}:
	default:
	}
}

// presenceLoop sends heartbeats (when enabled) and forgets agents whose
// heartbeats stopped long ago. The first is due a second or two after the
// start (firstHeartbeat); each one after is due within the interval
// the last one announced (heartbeatInterval), whatever made that one go
// out, in its second half (nextHeartbeat): receivers judge staleness by
// it, so none waits longer than it was told.
//
// It also sends one soon after a newcomer connects, so that the newcomer
// sees this agent's status at once rather than an interval later. A
// newcomer is a connected agent on the presence topic that this agent has
// not heard from for longer than an interval: it is seen either as a new
// topic peer or by its first heartbeat, whichever comes first. An agent
// heard from for longer is not one: it has had this agent's heartbeats
// through the mesh, and answering every new connection between agents
// that know each other made every agent send a heartbeat, to the whole
// mesh, for each connection the mesh formed. Newcomer heartbeats go out
// at most once per newcomerQuiet, one for all newcomers in that time.
func (n *Node) presenceLoop() {
	// Sweeping keeps the configured pace whatever this node's own
	// interval has stretched to: others' heartbeats go stale on theirs.
	sweepEvery := n.cfg.Presence.Interval
	if sweepEvery == 0 {
		sweepEvery = time.Second // only sweeping
	}
	sweep := time.NewTicker(sweepEvery)
	defer sweep.Stop()
	every := n.heartbeatInterval()
	first := firstHeartbeat()
	if n.cfg.firstHeartbeatAtOnce {
		first = 0
	}
	due := time.NewTimer(first)
	defer due.Stop()
	if n.cfg.Presence.Interval == 0 {
		due.Stop()
	}
	joins := time.NewTicker(newcomerCheck)
	defer joins.Stop()
	topic := protocol.PresenceTopic(n.idStr)
	topicPeers := map[peer.ID]bool{}
	var (
		newcomer bool // a newcomer is waiting for a heartbeat
		// answered is when the last heartbeat went out: each answers
		// the newcomers found before it, the first all agents found
		// since the start (firstHeartbeat).
		answered = time.Now()
		sent     bool // the first heartbeat is out
	)
	send := func() {
		if n.cfg.Presence.Interval == 0 {
			return
		}
		every = n.sendHeartbeat()
		due.Reset(nextHeartbeat(every))
		// Every heartbeat reaches the newcomers found so far.
		sent, newcomer, answered = true, false, time.Now()
	}
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-joins.C:
			peers := n.topics.Peers(topic)
			if !answersNewcomers(n.meshSize(len(peers))) {
				// A large mesh answers none: nothing to look for.
				topicPeers, newcomer = nil, false
				continue
			}
			now := map[peer.ID]bool{}
			for _, p := range peers {
				now[p] = true
				if !topicPeers[p] && !n.presence.heardSince(p, n.cfg.Now().Add(-every)) {
					newcomer = true
				}
			}
			topicPeers = now
			if !newcomer || !sent || time.Since(answered) < newcomerQuiet {
				continue
			}
		case <-n.presence.heardNew:
			newcomer = true // answered at the next check
			continue
		case <-sweep.C:
			n.sweepPresence()
			continue
		case <-due.C:
		case <-n.presence.kick:
		}
		send()
	}
}

// nextHeartbeat returns when the heartbeat after one announcing every is
// due: at a random point of the announced interval's second half. Agents
// that start together, or stretch their intervals on hearing the same
// heartbeats, would otherwise send theirs together, interval after
// interval: a mesh of N agents sending N heartbeats within a second, each
// time, rather than its budget spread over the interval. Earlier than
// announced is safe, as receivers judge staleness by the announced
// interval; the price is a mesh-wide rate a third above the budget
// (presenceAgents) on average.
func nextHeartbeat(every time.Duration) time.Duration {
	return every/2 + rand.N(every/2+1)
}

// firstHeartbeat returns when a node's first heartbeat is due after it
// starts: at a random point of the second after newcomerQuiet. By then a
// newcomer has connected to its bootstrap peers and its first DHT lookups
// have connected it to more, so the presence topic peers it counts
// (meshSize) tell it whether the mesh is large, and the first heartbeat
// announces a stretched interval rather than the configured one. Sent
// at once, it announced the configured interval to a mesh of any size,
// the next was due within it, and the newcomer, which had heard nobody,
// answered its neighbours as newcomers too: three heartbeats from each
// agent of a batch that joined together, to the whole mesh, within 10
// seconds (the scale harness counted 150 for 50 agents joining a mesh
// of 100 to 150; docs/scale.md). The price is that an agent is listed
// by others a second or two after it starts; its neighbours know it at
// once from the hello.
func firstHeartbeat() time.Duration {
	return newcomerQuiet + rand.N(newcomerQuiet+1)
}

// newcomerCheck is how often presence looks for new agents on its topic;
// newcomerQuiet spaces the heartbeats sent for newcomers.
const (
	newcomerCheck = 250 * time.Millisecond
	newcomerQuiet = time.Second
)

// presenceAgents is the size of mesh up to which an agent keeps its
// configured heartbeat interval; beyond it the interval grows with the
// mesh, so that the agents of any mesh send between them what
// presenceAgents agents send at that interval: one heartbeat a second at
// the default 10 s. Every heartbeat reaches every agent, so what presence
// costs each agent is this mesh-wide rate, not its own: each heartbeat is
// verified once (~45 µs) and forwarded to the agent's D mesh peers (~0.7
// KB each), and its id goes out in gossip. At a fixed interval that cost
// grows with the mesh (N/10 heartbeats a second at 10 s: 100 at 1,000
// agents); held at one a second it stays near 50 µs of CPU and 5 KB/s of
// forwarding per agent (plus the ids in gossip) whatever the mesh's size,
// small beside the topic traffic agents exist for. The budget was five a
// second (50 agents) until the scale harness showed presence to be a
// quarter of what each agent sent at 100 agents and 20 messages a second
// (docs/scale.md). What a larger mesh gives up is freshness (see Presence
// in the package doc); an operator who sets a shorter interval has asked
// for a larger budget and gets it.
const presenceAgents = 10

// newcomerAgents is the size of mesh up to which an agent answers a
// newcomer with a heartbeat (answersNewcomers).
const newcomerAgents = 50

// answersNewcomers says whether a node answers a newcomer with a
// heartbeat: only in a mesh of up to newcomerAgents agents (as the node
// counts them: meshSize). An answer is a heartbeat to the whole mesh,
// sent by each of the newcomer's neighbours, so in a larger mesh every
// join would cost every agent a verification per neighbour of the
// newcomer, and a mesh that grows or churns would pay that in proportion
// to its size. The newcomer does not need it to deal with its
// neighbours: the hello exchanged on connecting gives it their names,
// capabilities and features (Peers lists them, connected), and their next
// periodic heartbeats their status and load.
func answersNewcomers(meshSize int) bool {
	return meshSize <= newcomerAgents
}

// meshSize returns how many agents this node knows of, itself included:
// those it has heard heartbeats from or the topicPeers it is connected to
// on the presence topic, whichever are more. Each is a lower bound on the
// mesh's size; a newcomer has heard few heartbeats (a large mesh sends
// about one a second) but its first lookups connect it to dozens of
// agents.
func (n *Node) meshSize(topicPeers int) int {
	return max(n.presence.count(), topicPeers) + 1
}

// heartbeatInterval is the interval this node announces and keeps: the
// configured one, stretched in proportion when this node knows of more
// than presenceAgents agents on the presence topic, and at least the
// median of the intervals the agents it hears announce once it hears more
// than presenceAgents of them; within MaxHeartbeatInterval (past which
// receivers would clamp it and see the agent stale between heartbeats).
//
// Each agent counts what it has heard, so the agents of a settled mesh
// agree on their intervals to within the heartbeats still on their way.
// A newcomer has heard few: by its count alone it would send at the
// configured pace until it had heard every agent, a stretched interval
// later, and when a whole mesh starts at once every agent would, N/10
// heartbeats a second until the counts caught up. The median of what the
// others announce is the mesh's pace as those who have heard it count
// it, and one odd agent cannot move it; the price is that in a mesh where
// most agents chose a longer interval, the others follow them. Receivers
// judge staleness by the interval each heartbeat announces, so stretching
// needs nothing of them.
func (n *Node) heartbeatInterval() time.Duration {
	every := n.cfg.Presence.Interval
	if known := n.meshSize(len(n.topics.Peers(protocol.PresenceTopic(n.idStr)))); known > presenceAgents {
		every = every * time.Duration(known) / presenceAgents
	}
	every = max(every, n.presence.medianInterval(presenceAgents))
	return min(every, MaxHeartbeatInterval)
}

// heartbeat is this agent's heartbeat, announcing the interval every
// until its next one.
func (n *Node) heartbeat(every time.Duration) protocol.Heartbeat {
	inFlight, capacity := len(n.sem), cap(n.sem)
	declared := n.DeclaredStatus()
	status := declared.Status
	if inFlight >= capacity {
		status = protocol.StatusBusy
	}
	caps := n.Capabilities()
	names := make([]string, len(caps))
	for i, c := range caps {
		names[i] = c.Name
	}
	addrs := make([]string, 0, len(n.host.Addrs()))
	for _, a := range n.host.Addrs() {
		addrs = append(addrs, a.String())
	}
	return protocol.Heartbeat{
		AgentID:            n.idStr,
		Addrs:              addrs,
		Capabilities:       names,
		CapabilityDigest:   capabilityDigest(caps),
		InFlight:           inFlight,
		IntervalMS:         every.Milliseconds(),
		Load:               math.Round(float64(inFlight)/float64(capacity)*1000) / 1000,
		MaxConcurrent:      capacity,
		Name:               n.cfg.Name,
		PersonaType:        n.cfg.Presence.PersonaType,
		Status:             status,
		Mailboxes:          n.mailboxes.addrs,
		CurrentBead:        declared.CurrentBead,
		MaxConcurrentBeads: declared.MaxConcurrentBeads,
	}
}

// sendHeartbeat publishes this agent's heartbeat and returns the
// interval it announced, after which the next is due.
func (n *Node) sendHeartbeat() time.Duration {
	every := n.heartbeatInterval()
	payload, err := json.Marshal(n.heartbeat(every))
	if err != nil {
		n.log.Error("presence: encode heartbeat", "err", err)
		return every
	}
	// No wait: a heartbeat with nobody to hear it is not worth holding.
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Limits.IOTimeout)
	defer cancel()
	if _, err := n.topics.Publish(ctx, protocol.PresenceTopic(n.idStr), payload, pubsub.WithWait(0)); err != nil && !errors.Is(err, pubsub.ErrNoPeers) && n.ctx.Err() == nil {
		n.log.Debug("presence: publish heartbeat", "err", err)
	}
	return every
}

// receiveHeartbeat records a heartbeat. The bus has verified its
// signature; the topic must name its author, so that nobody speaks for
// another agent.
func (n *Node) receiveHeartbeat(m pubsub.Message) {
	if m.From == n.id {
		return
	}
	if id, ok := protocol.PresenceAgent(m.Topic); !ok || id != m.From.String() {
		n.log.Debug("presence: heartbeat on another agent's topic", "topic", m.Topic, "remote_peer", m.From)
		return
	}
	var hb protocol.Heartbeat
	if err := protocol.DecodePayload(m.Payload, "heartbeat", &hb); err != nil || hb.AgentID != m.From.String() ||
		(protocol.AgentStatus{Status: hb.Status, CurrentBead: hb.CurrentBead, MaxConcurrentBeads: hb.MaxConcurrentBeads}).Check() != nil {
		n.log.Debug("presence: malformed heartbeat", "remote_peer", m.From, "err", err)
		return
	}
	interval := time.Duration(hb.IntervalMS) * time.Millisecond
	interval = min(max(interval, MinHeartbeatInterval), MaxHeartbeatInterval)
	if n.presence.record(m.From, &presenceState{hb: hb, at: n.cfg.Now(), interval: interval}) &&
		n.host.Network().Connectedness(m.From) == network.Connected {
		select {
		case n.presence.heardNew <- struct{}{}:
		default:
		}
	}
	n.seen(m.From, hb.Addrs...)
	if len(hb.Mailboxes) > 0 && (&protocol.Hello{Mailboxes: hb.Mailboxes}).CheckMailboxes() == nil {
		// Added, never removed, from a heartbeat: the hello is the
		// agent's full statement of them.
		n.noteMailboxes(m.From, hb.Mailboxes)
	}
	ps, known := n.peers.get(m.From)
	stale := known && capabilityDigest(ps.capabilities) != hb.CapabilityDigest
	// The capabilities changed since the hello we hold (or a hello was
	// lost): ask for a fresh one if the agent is a direct peer.
	if stale && n.host.Network().Connectedness(m.From) == network.Connected {
		p := m.From
		n.goTracked(func() { n.sayHello(p) })
	}
}

// sweepPresence forgets the heartbeats of agents past DropAfter, and
// their hellos when they are not connected.
func (n *Node) sweepPresence() {
	for _, id := range n.presence.sweep(n.cfg.Now()) {
		n.peers.forgetDisconnected(id)
	}
}
