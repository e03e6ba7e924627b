package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/meshagent/meshagent/mailbox"
	meshproto "github.com/meshagent/meshagent/protocol"
)

// HearAgents makes n hold the heartbeats of count made-up agents, as if
// it had heard them through the mesh, each announcing interval.
func HearAgents(n *Node, count int, interval time.Duration) {
	for i := range count {
		id := peer.ID(fmt.Sprintf("made-up agent %d", i))
		n.presence.record(id, &presenceState{
			hb:       meshproto.Heartbeat{AgentID: id.String(), Status: meshproto.StatusAvailable},
			at:       n.cfg.Now(),
			interval: interval,
		})
	}
}

// WithFirstHeartbeatAtOnce sends a node's first heartbeat as its presence
// starts, before any connection, rather than a second or two later.
func WithFirstHeartbeatAtOnce() Option {
	return func(c *Config) error { c.firstHeartbeatAtOnce = true; return nil }
}

// PresenceAgents is the size of mesh past which heartbeat intervals
// stretch.
const PresenceAgents = presenceAgents

// SpareWorkers is how many of n's request streams keep a spare worker.
func SpareWorkers(n *Node) int { return int(n.inbound.spares.Load()) }

// MessageBatches returns how many requests n's batcher sent and how many
// direct messages they carried.
func MessageBatches(n *Node) (requests, messages int64) {
	return n.batches.requests.Load(), n.batches.messages.Load()
}

// OutboxAttempts is how many delivery attempts n's outbox made.
func OutboxAttempts(n *Node) uint64 { return n.outbox.attempts.Load() }

// Seen tells n that agent p was heard from, as a hello does.
func Seen(n *Node, p peer.ID) { n.seen(p) }

// HoldsMailFor reports whether relay r has registered agent as one that
// named it as its mailbox (so that r takes deposits for it).
func HoldsMailFor(r *Node, agent peer.ID) bool {
	_, ok, err := r.cfg.Store.Marked(context.Background(), mailbox.AgentsScope, agent.String(), time.Now())
	return err == nil && ok
}

// DropLiveBeadPatches makes n ignore the bead context patches it gets
// live, so that only its catch-ups from history keepers bring them.
func DropLiveBeadPatches(n *Node, drop bool) { n.contexts.dropLive.Store(drop) }

// LoseMailboxAnswers makes n lose the relay's answer to its next count
// mailbox requests: each is sent whole and served, and its answer read
// to the end and dropped, as when a relay dies or its connection breaks
// right after doing what was asked. Call it before n sends anything.
func LoseMailboxAnswers(n *Node, count int32) {
	left := &atomic.Int32{}
	left.Store(count)
	n.mailboxes.client.Host = answerLosingHost{Host: n.host, left: left}
}

type answerLosingHost struct {
	host.Host
	left *atomic.Int32
}

func (h answerLosingHost) NewStream(ctx context.Context, p peer.ID, pids ...protocol.ID) (network.Stream, error) {
	s, err := h.Host.NewStream(ctx, p, pids...)
	if err != nil || h.left.Add(-1) < 0 {
		return s, err
	}
	return answerLosingStream{s}, nil
}

type answerLosingStream struct{ network.Stream }

func (s answerLosingStream) Read([]byte) (int, error) {
	_, _ = io.Copy(io.Discard, s.Stream) // the relay has answered: it did the work
	return 0, errors.New("connection lost before the answer (test)")
}

// NextHeartbeat is when the heartbeat after one announcing every is due.
var NextHeartbeat = nextHeartbeat

// TagBootstrap is the connection manager tag protecting bootstrap peers.
const TagBootstrap = tagBootstrap

// BootstrapEnough is how many other peers end that protection.
const BootstrapEnough = bootstrapEnough
