package protocol

import (
	"encoding/json"
	"time"
)

// Status is the status of a response payload.
type Status string

// Response statuses. A request is answered by zero or more StatusInProgress
// responses and exactly one final StatusSuccess or StatusError.
const (
	StatusSuccess    Status = "success"
	StatusError      Status = "error"
	StatusInProgress Status = "in_progress"
)

// Final reports whether a response with this status ends the request.
func (s Status) Final() bool { return s == StatusSuccess || s == StatusError }

// Request is the payload of a request envelope. Seed 000's capability_name
// is Action.
type Request struct {
	Action        string `json:"action"`
	CorrelationID string `json:"correlationId"`
	// Detach, when positive, submits the request as a detached task: the
	// provider answers once it accepted and recorded it ({"taskId",
	// "agentId","state"}) and its handler may run for Detach
	// milliseconds (at most MaxDetachMs); the final answer comes later
	// (task.status, and a task.result request to the requester).
	Detach int64           `json:"detach,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	// Timeout is the caller's timeout in milliseconds; 0 means the
	// provider's default.
	Timeout int64 `json:"timeout,omitempty"`
}

// Response is the payload of a response envelope.
type Response struct {
	// Fields are in canonical (sorted) key order, so encoding/json output
	// is already RFC 8785 canonical in the common case.
	CorrelationID string          `json:"correlationId"`
	Result        json.RawMessage `json:"result,omitempty"`
	Status        Status          `json:"status"`
}

// Hello is the payload of a hello envelope. Seed 002 carries version and
// features; meshagent adds the full capability objects (seed 000) so that a
// peer learns schemas and ACLs in the same exchange.
type Hello struct {
	Capabilities []Capability `json:"capabilities,omitempty"`
	Features     []string     `json:"features,omitempty"`
	// Mailboxes are the relays (multiaddrs ending in /p2p/<relay id>) that
	// hold messages for the agent while it is away: a sender that cannot
	// reach it deposits there. At most MaxMailboxes, each at most
	// MaxMailboxAddrLen bytes (CheckMailboxes). Absent when none.
	Mailboxes []string `json:"mailboxes,omitempty"`
	// Seq orders an agent's hellos: it grows whenever the agent's
	// capabilities change (meshagent uses the time of the change in
	// nanoseconds), so a receiver ignores a hello older than one it has
	// already applied. Hellos travel on separate streams and can arrive out
	// of order.
	Seq     int64  `json:"seq,omitempty"`
	Version string `json:"version"`
}

// Bounds of Hello.Mailboxes: a hello names a few relays, not a list to
// index.
const (
	MaxMailboxes      = 4
	MaxMailboxAddrLen = 512
)

// CheckMailboxes checks the bounds of h.Mailboxes (their syntax as
// multiaddrs is the receiver's to check).
func (h *Hello) CheckMailboxes() error {
	if len(h.Mailboxes) > MaxMailboxes {
		return Errorf(CodeInvalidMessage, "hello names %d mailboxes, at most %d", len(h.Mailboxes), MaxMailboxes)
	}
	for _, a := range h.Mailboxes {
		if a == "" || len(a) > MaxMailboxAddrLen {
			return Errorf(CodeInvalidMessage, "hello mailbox address must be 1 to %d bytes", MaxMailboxAddrLen)
		}
	}
	return nil
}

// CallRequest is what a caller asks of the mesh: run Action on agent To.
type CallRequest struct {
	// To is the target agent id, as a peer ID or a base64 public key.
	To string `json:"to"`
	// Action names the capability to invoke.
	Action string `json:"action"`
	// Params is the JSON object handed to the capability.
	Params json.RawMessage `json:"params,omitempty"`
	// Timeout bounds the whole call; 0 means the node's default.
	Timeout time.Duration `json:"-"`
	// CorrelationID is the request's id, which is also its task id on the
	// provider (task.status, task.cancel). Empty: a fresh one.
	CorrelationID string `json:"-"`
	// Progress, if set, receives each in_progress response in order. It is
	// called from the node's reader goroutine and must not block.
	Progress func(*Response) `json:"-"`
	// Signed, if set, receives the provider's final response as its
	// signed envelope in the embedded JSON form (with "signature"): the
	// call's receipt, which OpenReceipt and meshagent verify check
	// offline. The canonical bytes inside are those the caller received
	// and verified. Called once, before Call returns, only when the
	// provider answered with a response envelope (not an error one);
	// nothing is kept when it is nil.
	Signed func(json.RawMessage) `json:"-"`
	// OnBehalfOf, if set, names the client of the calling agent the
	// request is made for ("lobby:alice" for a relay's lobby agent): it
	// travels signed in the request's metadata (MetaOnBehalfOf) and the
	// provider matches it against "<agent id>/<client>" entries of its
	// ACLs and policy. It is never read from JSON: only the calling
	// program sets it.
	OnBehalfOf string `json:"-"`
}

// PeerInfo is what a node knows of another agent.
type PeerInfo struct {
	AgentID      string       `json:"agentId"`
	PublicKey    string       `json:"publicKey,omitempty"`
	Name         string       `json:"name,omitempty"`
	Capabilities []Capability `json:"capabilities"`
	Features     []string     `json:"features,omitempty"`
	Addrs        []string     `json:"addrs"`
	Connected    bool         `json:"connected"`
	LastHello    time.Time    `json:"lastHello,omitzero"`
	// LatencyMS is the smoothed round-trip time in milliseconds, 0 if unknown.
	LatencyMS float64 `json:"latencyMs,omitempty"`
	// Status is from the agent's last heartbeat, or StatusStale once it is
	// overdue; empty if no heartbeat was seen.
	Status PresenceStatus `json:"status,omitempty"`
	// LastHeartbeat is when its last heartbeat arrived.
	LastHeartbeat time.Time `json:"lastHeartbeat,omitzero"`
	// Load is from the last heartbeat: in-flight requests / capacity.
	Load        float64 `json:"load,omitempty"`
	PersonaType string  `json:"personaType,omitempty"`
	// CurrentBead and MaxConcurrentBeads are from the last heartbeat: what
	// the agent declared (AgentStatus).
	CurrentBead        string `json:"currentBead,omitempty"`
	MaxConcurrentBeads int    `json:"maxConcurrentBeads,omitempty"`
}
