package protocol

import "strings"

// PresenceFamily is the topic family of heartbeats: agent A publishes its
// heartbeats to "presence:A". Subscribing to "presence:*" shows them all.
const PresenceFamily = "presence"

// PresenceTopic returns the topic an agent publishes its heartbeats to.
func PresenceTopic(agentID string) string { return PresenceFamily + ":" + agentID }

// PresenceAgent returns the agent id of a presence topic, or false.
func PresenceAgent(topic string) (string, bool) {
	id, ok := strings.CutPrefix(topic, PresenceFamily+":")
	return id, ok && id != ""
}

// PresenceStatus is an agent's status in the registry (seed 004).
type PresenceStatus string

// Statuses an agent announces, and the one a receiver assigns when
// heartbeats stop.
const (
	StatusAvailable PresenceStatus = "available"
	StatusBusy      PresenceStatus = "busy"
	// StatusStale is never sent: a receiver shows it when an agent's
	// heartbeats are overdue.
	StatusStale PresenceStatus = "stale"
)

// Heartbeat is the payload of a presence message, after seed 004's agent
// registry entry. It is published periodically and when the status or the
// capabilities change.
type Heartbeat struct {
	AgentID      string   `json:"agent_id"`
	Addrs        []string `json:"addrs,omitempty"`
	Capabilities []string `json:"capabilities"`
	// CapabilityDigest is the hex SHA-256 of the canonical JSON array of
	// the agent's capability objects, sorted by name: a receiver whose
	// hello is older than the digest knows to ask for a fresh one.
	CapabilityDigest string `json:"capability_digest"`
	InFlight         int    `json:"in_flight"`
	// IntervalMS is the sender's heartbeat interval, by which receivers
	// judge it stale.
	IntervalMS int64 `json:"interval_ms"`
	// Load is InFlight / MaxConcurrent, rounded to 3 decimals.
	Load float64 `json:"load"`
	// Mailboxes are the agent's mailbox relays, as in its hello (bounded
	// alike): heard mesh-wide, they reach senders that never exchanged a
	// hello with it.
	Mailboxes     []string       `json:"mailboxes,omitempty"`
	MaxConcurrent int            `json:"max_concurrent"`
	Name          string         `json:"name,omitempty"`
	PersonaType   string         `json:"persona_type,omitempty"`
	Status        PresenceStatus `json:"status"`
	// CurrentBead and MaxConcurrentBeads are what the agent declared with
	// SetStatus (seed 004's registry): the bead it works on and how many
	// it takes at once.
	CurrentBead        string `json:"current_bead,omitempty"`
	MaxConcurrentBeads int    `json:"max_concurrent_beads,omitempty"`
}

// MaxConcurrentBeads bounds the max_concurrent_beads an agent declares.
const MaxConcurrentBeads = 10000

// AgentStatus is what an agent declares of itself in its heartbeats (seed
// 004's registry): available or busy, the bead it works on (empty: none)
// and how many beads it takes at once (0: not said). It is the params of
// the local API's mesh.setStatus.
type AgentStatus struct {
	Status             PresenceStatus `json:"status"`
	CurrentBead        string         `json:"currentBead,omitempty"`
	MaxConcurrentBeads int            `json:"maxConcurrentBeads,omitempty"`
}

// Check reports whether s is a status an agent may declare.
func (s AgentStatus) Check() error {
	switch {
	case s.Status != StatusAvailable && s.Status != StatusBusy:
		return Errorf(CodeInvalidMessage, "status must be %q or %q", StatusAvailable, StatusBusy)
	case len(s.CurrentBead) > MaxNameLen:
		return Errorf(CodeInvalidMessage, "current bead must be at most %d bytes", MaxNameLen)
	case s.MaxConcurrentBeads < 0 || s.MaxConcurrentBeads > MaxConcurrentBeads:
		return Errorf(CodeInvalidMessage, "max concurrent beads must be 0 to %d", MaxConcurrentBeads)
	}
	return nil
}
