package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// Provider is the node's side of serving through the local API: what a
// server needs so that its clients can serve capabilities (mesh.serve)
// and send and receive direct messages (mesh.onMessage,
// mesh.sendMessage). cli adapts *node.Node to it; rpc never imports the
// node. Implementations must be safe for concurrent use.
type Provider interface {
	// Offer replaces the capabilities the node offers on behalf of this
	// server's clients with caps (none: withdraws them all) and announces
	// the change (hello, directory). Every request for one of them reaches
	// h only after the node's own checks (signature, ACL, policy, input
	// schema, rate limits), and h's result is checked against the
	// capability's output schema. A name the node already offers from
	// another source is an error.
	Offer(caps []protocol.Capability, h TaskHandler) error
	// OnMessage sets the handler of the node's direct messages (seed 004
	// agent_message); nil restores the node's default. The node
	// processes each (sender, message id) once.
	OnMessage(h MessageHandler)
	// SendMessage delivers a direct message to agent to, at least once
	// (the node retries, and dead-letters it when every attempt failed),
	// and returns the receiver's response (null unless it requires one).
	// When the agent is away and the message waits in the node's outbox,
	// on disk, to go out when it is back, the error matches ErrQueued.
	// When the agent is away and the node's store cannot write the
	// message (a full disk), nothing is queued and the error matches
	// ErrNotAccepted.
	SendMessage(ctx context.Context, to string, m protocol.AgentMessage) (json.RawMessage, error)
}

// Task is one request for a served capability, as the node hands it over
// once its checks passed.
type Task struct {
	// Requester is the verified requester, as authorized_requester_ids
	// names it.
	Requester string
	// Capability is the capability asked for.
	Capability string
	// Params is the request's params object (nil when absent).
	Params json.RawMessage
	// CorrelationID is the requester's request id, which is also its seed
	// 003 task id on this node (task status, task cancel).
	CorrelationID string
	// Deadline is when the node gives up on the request; zero for none.
	Deadline time.Time
	// Progress sends an in_progress response carrying result to the
	// requester.
	Progress func(result json.RawMessage) error
	// SetState marks the request's task with a non-final seed 003 state
	// (ESCALATED, say).
	SetState func(state protocol.TaskState)
	// ID is the task's id as its requester knows it (task status, task
	// wait); mesh.handle's requesterTaskId.
	ID string
	// Escalate marks the task ESCALATED with reason, for the operator to
	// decide; nil when the task cannot be escalated.
	Escalate func(reason string) error
	// Decision waits for the operator's decision once the task was
	// escalated.
	Decision func(ctx context.Context) (protocol.TaskDecision, error)
}

// TaskHandler answers a Task: the result, or an error (a *protocol.Error
// keeps its code). ctx ends when the requester cancels or the deadline
// passes.
type TaskHandler func(ctx context.Context, t *Task) (json.RawMessage, error)

// MessageHandler answers a direct message from agent from: the response
// (null when none is required), or an error.
type MessageHandler func(ctx context.Context, from string, m protocol.AgentMessage) (json.RawMessage, error)

// Method names of serving and direct messages, served with a Provider
// only. Direct messages to the client are mesh.agentMessage because
// mesh.message already names the topic-message notification.
const (
	MethodMeshServe        = "mesh.serve"
	MethodMeshUnserve      = "mesh.unserve"
	MethodMeshHandle       = "mesh.handle"
	MethodMeshSetState     = "mesh.setState"
	MethodMeshCancel       = "mesh.cancel"
	MethodMeshOnMessage    = "mesh.onMessage"
	MethodMeshAgentMessage = "mesh.agentMessage"
	MethodMeshSendMessage  = "mesh.sendMessage"
)

// DefaultServeGrace is how long a capability (or the direct messages)
// whose last serving connection went away stays offered, waiting for a
// client to serve it again (a reconnect, typically under the same
// clientId), before the node withdraws it.
const DefaultServeGrace = 5 * time.Second

// deadlineLayout is mesh.handle's deadline: RFC 3339 in UTC with
// milliseconds, which every client language's date parser reads.
const deadlineLayout = "2006-01-02T15:04:05.000Z07:00"

// ServeParams are the params of mesh.serve: capability objects as seed
// 000 has them (plus "idempotent"), without a handler.
type ServeParams struct {
	Capabilities []json.RawMessage `json:"capabilities"`
}

// UnserveParams are the params of mesh.unserve: capability names.
type UnserveParams struct {
	Capabilities []string `json:"capabilities"`
}

// ServeResult is the result of mesh.serve and mesh.unserve: the names
// this connection serves afterwards, sorted.
type ServeResult struct {
	Serving []string `json:"serving"`
}

// HandleParams are the params of mesh.handle, the node's request to a
// serving client. TaskID names this hand-over: the client's mesh.progress
// and mesh.setState, and the node's mesh.cancel, refer to it.
type HandleParams struct {
	TaskID        string          `json:"taskId"`
	Requester     string          `json:"requester"`
	Capability    string          `json:"capability"`
	Params        json.RawMessage `json:"params"`
	CorrelationID string          `json:"correlationId"`
	// Deadline is RFC 3339 with milliseconds, in UTC; absent for none.
	Deadline string `json:"deadline,omitempty"`
	// RequesterTaskID is the task's id as its requester knows it (task
	// status, task wait, task resolve): for a detached task the id its
	// provider chose, else the correlation id.
	RequesterTaskID string `json:"requesterTaskId,omitempty"`
}

// TaskProgressParams are the params of the client's mesh.progress
// notification: an in_progress response for the task. (The node's own
// mesh.progress, about a mesh.call, is ProgressParams.)
type TaskProgressParams struct {
	TaskID string          `json:"taskId"`
	Result json.RawMessage `json:"result"`
}

// SetStateParams are the params of mesh.setState. Reason is the note of
// the change: for ESCALATED, the escalation's reason (the client then
// gets the operator's decision as mesh.taskResolved while it still
// handles the task).
type SetStateParams struct {
	TaskID string             `json:"taskId"`
	State  protocol.TaskState `json:"state"`
	Reason string             `json:"reason,omitempty"`
}

// CancelParams are the params of mesh.cancel.
type CancelParams struct {
	TaskID string `json:"taskId"`
}

// AgentMessageParams are the params of mesh.agentMessage: a direct
// message and its verified sender.
type AgentMessageParams struct {
	From    string                `json:"from"`
	Message protocol.AgentMessage `json:"message"`
}

// SendMessageParams are the params of mesh.sendMessage. The message's
// message_id is made up when absent, and its priority is normal.
type SendMessageParams struct {
	AgentID string          `json:"agentId"`
	Message json.RawMessage `json:"message"`
}

// ErrQueued is matched by the error a Provider's SendMessage returns when
// the agent is away and the message was queued in the node's outbox:
// mesh.sendMessage answers {"queued": true} then, not an error.
var ErrQueued = errors.New("rpc: message queued for an agent that is away")

// ErrNotAccepted is matched by the error a Provider's SendMessage returns
// when the agent is away and the node's store could not write the message
// (no space left on device, an I/O error): nothing is queued, and the same
// message may be accepted once the store writes again. mesh.sendMessage
// answers -32005 (CodeServerBusy) then, the code the bus's sendMessage
// answers for a store that cannot write, never a result.
var ErrNotAccepted = errors.New("the node's store cannot write")

// SendMessageResult is the result of mesh.sendMessage. Queued is false
// when the message was delivered (Response is the receiver's answer when
// it gave one), and true when the agent was away and the message waits in
// the node's outbox, on disk, to go out when the agent is back (within the
// node's message TTL, seven days by default; then a dead letter): no
// Response then.
type SendMessageResult struct {
	MessageID string          `json:"messageId"`
	Queued    bool            `json:"queued"`
	Response  json.RawMessage `json:"response,omitempty"`
}

// WithProvider serves capabilities and direct messages for the server's
// clients through p (mesh.serve, mesh.unserve, mesh.onMessage,
// mesh.sendMessage, and the client's mesh.progress and mesh.setState).
// Give one only to a node's local API: a public listener's clients are
// refused these methods.
func WithProvider(p Provider) Option {
	return func(cfg *Config) error {
		if p == nil {
			return errors.New("nil Provider")
		}
		cfg.Provider = p
		return nil
	}
}

// WithServeGrace sets how long a capability whose last serving connection
// went away stays offered (DefaultServeGrace).
func WithServeGrace(d time.Duration) Option {
	return func(cfg *Config) error {
		if d < 0 {
			return errors.New("negative serve grace")
		}
		cfg.ServeGrace = d
		return nil
	}
}
