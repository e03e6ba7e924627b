package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
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
	// busy is this agent's declared agent_busy (SetBusy).
	busy atomic.Bool

	mu sync.Mutex
	m  map[peer.ID]*presenceState
}

func newPresence() *presence {
	return &presence{kick: make(chan struct{}, 1), m: map[peer.ID]*presenceState{}}
}

// record keeps p's latest heartbeat, forgetting the oldest one when full.
func (pr *presence) record(p peer.ID, s *presenceState) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if _, ok := pr.m[p]; !ok && len(pr.m) >= maxKnownPeers {
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
	if n.presence.busy.Swap(busy) != busy {
		n.kickPresence()
	}
}

func (n *Node) kickPresence() {
	select {
	case n.presence.kick <- struct{}{}:
	default:
	}
}

// presenceLoop sends heartbeats (when enabled) and forgets agents whose
// heartbeats stopped long ago. It also sends one as soon as a new agent
// joins the presence topic, so that a newcomer sees this agent's status
// at once rather than an interval later.
func (n *Node) presenceLoop() {
	every := n.cfg.Presence.Interval
	if every == 0 {
		every = time.Second // only sweeping
	}
	t := time.NewTicker(every)
	defer t.Stop()
	joins := time.NewTicker(newcomerCheck)
	defer joins.Stop()
	topic := protocol.PresenceTopic(n.idStr)
	topicPeers := len(n.topics.Peers(topic))
	n.sendHeartbeat()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-joins.C:
			now := len(n.topics.Peers(topic))
			grew := now > topicPeers
			topicPeers = now
			if !grew {
				continue
			}
		case <-t.C:
			n.sweepPresence()
		case <-n.presence.kick:
		}
		n.sendHeartbeat()
	}
}

// newcomerCheck is how often presence looks for new agents on its topic.
const newcomerCheck = 250 * time.Millisecond

func (n *Node) heartbeat() protocol.Heartbeat {
	inFlight, capacity := len(n.sem), cap(n.sem)
	status := protocol.StatusAvailable
	if n.presence.busy.Load() || inFlight >= capacity {
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
		AgentID:          n.idStr,
		Addrs:            addrs,
		Capabilities:     names,
		CapabilityDigest: capabilityDigest(caps),
		InFlight:         inFlight,
		IntervalMS:       n.cfg.Presence.Interval.Milliseconds(),
		Load:             math.Round(float64(inFlight)/float64(capacity)*1000) / 1000,
		MaxConcurrent:    capacity,
		Name:             n.cfg.Name,
		PersonaType:      n.cfg.Presence.PersonaType,
		Status:           status,
		Mailboxes:        n.mailboxes.addrs,
	}
}

func (n *Node) sendHeartbeat() {
	if n.cfg.Presence.Interval == 0 {
		return
	}
	payload, err := json.Marshal(n.heartbeat())
	if err != nil {
		n.log.Error("presence: encode heartbeat", "err", err)
		return
	}
	// No wait: a heartbeat with nobody to hear it is not worth holding.
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Limits.IOTimeout)
	defer cancel()
	if _, err := n.topics.Publish(ctx, protocol.PresenceTopic(n.idStr), payload, pubsub.WithWait(0)); err != nil && !errors.Is(err, pubsub.ErrNoPeers) && n.ctx.Err() == nil {
		n.log.Debug("presence: publish heartbeat", "err", err)
	}
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
		(hb.Status != protocol.StatusAvailable && hb.Status != protocol.StatusBusy) {
		n.log.Debug("presence: malformed heartbeat", "remote_peer", m.From, "err", err)
		return
	}
	interval := time.Duration(hb.IntervalMS) * time.Millisecond
	interval = min(max(interval, MinHeartbeatInterval), MaxHeartbeatInterval)
	n.presence.record(m.From, &presenceState{hb: hb, at: n.cfg.Now(), interval: interval})
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
