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
}
