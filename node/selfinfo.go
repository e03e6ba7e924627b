package node

import (
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// SelfInfo describes this agent the way Peers describes the others: its
// id and public key, name, capabilities, addresses, and the status, load
// and persona type its next heartbeat announces. LastHeartbeat is now: an
// agent is never stale to itself.
func (n *Node) SelfInfo() protocol.PeerInfo {
	hb := n.heartbeat(n.cfg.Presence.Interval)
	pub, _ := sign.PublicKeyBase64(n.id) // an Ed25519 id always has one
	return protocol.PeerInfo{
		AgentID:            n.idStr,
		PublicKey:          pub,
		Name:               n.cfg.Name,
		Capabilities:       n.Capabilities(),
		Addrs:              hb.Addrs,
		Connected:          true,
		Status:             hb.Status,
		LastHeartbeat:      time.Now().UTC(),
		Load:               hb.Load,
		PersonaType:        hb.PersonaType,
		CurrentBead:        hb.CurrentBead,
		MaxConcurrentBeads: hb.MaxConcurrentBeads,
	}
}
