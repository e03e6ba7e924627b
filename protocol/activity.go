package protocol

import "time"

// ConnInfo describes one open libp2p connection of a node, as an
// operator's status page draws it.
type ConnInfo struct {
	// AgentID is the remote agent.
	AgentID string `json:"agentId"`
	// RemoteAddr is the remote multiaddr of the connection; it contains
	// /p2p-circuit when the connection goes through a relay.
	RemoteAddr string `json:"remoteAddr"`
	// Direction is "inbound" or "outbound".
	Direction string `json:"direction"`
	// Relayed reports a connection through a circuit relay rather than a
	// direct one.
	Relayed bool `json:"relayed"`
	// Opened is when the connection was established.
	Opened time.Time `json:"opened,omitzero"`
}

// Directions of a call in a CallRecord.
const (
	CallSent   = "sent"   // this node asked another agent
	CallServed = "served" // another agent (or a local client) asked this node
)

// CallRecord is one finished call, as a node remembers the last few of
// them for its operator.
type CallRecord struct {
	// At is when the call finished.
	At time.Time `json:"at"`
	// Direction is CallSent or CallServed.
	Direction string `json:"direction"`
	// Capability is the action asked for.
	Capability string `json:"capability"`
	// AgentID is the other side: the provider of a call sent (empty when
	// none was found), the requester of a call served.
	AgentID string `json:"agentId,omitempty"`
	// Outcome is "success" or the protocol error code the call ended
	// with.
	Outcome string `json:"outcome"`
	// DurationMS is how long the call took, in milliseconds.
	DurationMS float64 `json:"durationMs"`
}
