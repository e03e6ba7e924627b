package node

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/protocol"
)

// recentCallsCap bounds the calls a node remembers for its operator: a
// screenful, so that the ring costs nothing under load.
const recentCallsCap = 32

// callRing holds the last recentCallsCap finished calls, oldest first
// once full. Its zero value is ready; it has its own lock so that
// recording a call never waits on the node's.
type callRing struct {
	mu   sync.Mutex
	buf  []protocol.CallRecord
	next int // where the next record goes once buf is full
}

func (r *callRing) add(c protocol.CallRecord) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buf) < recentCallsCap {
		r.buf = append(r.buf, c)
		return
	}
	r.buf[r.next] = c
	r.next = (r.next + 1) % recentCallsCap
}

// snapshot returns the records, newest first.
func (r *callRing) snapshot() []protocol.CallRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]protocol.CallRecord, 0, len(r.buf))
	for i := range r.buf {
		// Walk back from the newest: the one before next.
		out = append(out, r.buf[(r.next-1-i+2*len(r.buf))%len(r.buf)])
	}
	return out
}

// RecentCalls returns the last calls this node sent or served (at most
// 32), newest first, with their outcome.
func (n *Node) RecentCalls() []protocol.CallRecord { return n.recent.snapshot() }

// recordCall remembers a finished call for RecentCalls.
func (n *Node) recordCall(direction, capability, agent string, err error, start time.Time) {
	n.recent.add(protocol.CallRecord{
		At:         n.cfg.Now(),
		Direction:  direction,
		Capability: capability,
		AgentID:    agent,
		Outcome:    outcome(err),
		DurationMS: float64(time.Since(start).Microseconds()) / 1000,
	})
}

// Conns returns the node's open libp2p connections, one entry per
// connection (a peer reached both directly and through a relay has two).
func (n *Node) Conns() []protocol.ConnInfo {
	if n.host == nil {
		return nil
	}
	conns := n.host.Network().Conns()
	out := make([]protocol.ConnInfo, 0, len(conns))
	for _, c := range conns {
		st := c.Stat()
		dir := "outbound"
		if st.Direction == network.DirInbound {
			dir = "inbound"
		}
		out = append(out, protocol.ConnInfo{
			AgentID:    c.RemotePeer().String(),
			RemoteAddr: c.RemoteMultiaddr().String(),
			Direction:  dir,
			Relayed:    isCircuit(c.RemoteMultiaddr()),
			Opened:     st.Opened,
		})
	}
	return out
}

// isCircuit reports a multiaddr through a circuit relay (/p2p-circuit).
func isCircuit(a ma.Multiaddr) bool {
	_, err := a.ValueForProtocol(ma.P_CIRCUIT)
	return err == nil
}
