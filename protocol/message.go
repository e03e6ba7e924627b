package protocol

import (
	"encoding/json"
	"fmt"
)

// MessageCapability is the capability every node answers for seed 004's
// direct agent messages. It is built in (a node need not declare it) and
// not advertised.
const MessageCapability = "agent.message"

// Message priorities (seed 004).
const (
	PriorityLow    = "low"
	PriorityNormal = "normal"
	PriorityHigh   = "high"
	PriorityUrgent = "urgent"
)

// AgentMessage is seed 004's direct message ("type": "agent_message"),
// carried as the params of an agent.message request. MessageID is what the
// receiver deduplicates on: a message retried after a lost answer is
// processed once.
type AgentMessage struct {
	MessageID        string          `json:"message_id"`
	Subject          string          `json:"subject"`
	Body             string          `json:"body"`
	Priority         string          `json:"priority,omitempty"`
	RequiresResponse bool            `json:"requires_response,omitempty"`
	Context          json.RawMessage `json:"context,omitempty"`
}

// Validate checks a message's fields.
func (m AgentMessage) Validate() error {
	switch {
	case m.MessageID == "" || len(m.MessageID) > 128:
		return fmt.Errorf("message_id must be 1 to 128 bytes")
	case m.Subject == "" && m.Body == "":
		return fmt.Errorf("a message needs a subject or a body")
	}
	switch m.Priority {
	case "", PriorityLow, PriorityNormal, PriorityHigh, PriorityUrgent:
	default:
		return fmt.Errorf("priority %q must be low, normal, high or urgent", m.Priority)
	}
	return nil
}

// MessageBatchCapability is the built-in capability that takes several
// direct messages in one signed request, so that a sender with many
// messages for one agent pays for one signature, one verification and one
// answer per batch rather than per message. A node sends a batch only
// while earlier messages to the same agent are in flight (a lone message
// goes as agent.message), and falls back to agent.message for an agent
// that does not answer this capability.
const MessageBatchCapability = "agent.messages"

// MaxMessageBatch bounds the messages of one batch.
const MaxMessageBatch = 256

// MessageBatch is the params of an agent.messages request: each element
// is an AgentMessage.
type MessageBatch struct {
	Messages []json.RawMessage `json:"messages"`
}

// MessageBatchResult is the result of an agent.messages request: one
// outcome per message, in the order sent.
type MessageBatchResult struct {
	Results []MessageOutcome `json:"results"`
}

// MessageOutcome is one message's outcome in a batch: its response (null
// unless it requires one), or the error it would have been answered with
// alone.
type MessageOutcome struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *Error          `json:"error,omitempty"`
}
