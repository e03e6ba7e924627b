package bus

import "encoding/json"

// Method names of the seed 001 bus.
const (
	MethodSubscribe      = "subscribe"
	MethodUnsubscribe    = "unsubscribe"
	MethodSendMessage    = "sendMessage"
	MethodProcessMessage = "processMessage"
	// Extensions for the CLI: history and the dead-letter queue.
	MethodBusHistory     = "bus.history"
	MethodBusDeadLetters = "bus.deadLetters"
	MethodBusReplay      = "bus.replay"
)

// SuccessResult is subscribe's and unsubscribe's result.
type SuccessResult struct {
	Success bool `json:"success"`
}

// Ack is one subscriber's acknowledgement in a sendMessage result.
type Ack struct {
	ClientID  string `json:"client_id"`
	Processed bool   `json:"processed"`
	Message   string `json:"message,omitempty"`
	// Retrying is set when the delivery will be retried (the message is
	// in the persisted outbox).
	Retrying bool `json:"retrying,omitempty"`
	// Queued is set when the message is for a mesh agent that is away:
	// it waits in the node's outbox, on disk, and goes out when the agent
	// is back (see Forwarder).
	Queued bool `json:"queued,omitempty"`
	// Receipt, on the ack of a delivery to a mesh agent (agent:<id>), is
	// the agent's signed final response envelope in the embedded JSON
	// form (protocol.OpenReceipt): proof, to anyone, that it answered.
	// An extension of seed 001's ack; local subscribers' acks have none.
	// A pointer, so that an Ack stays comparable.
	Receipt *json.RawMessage `json:"receipt,omitempty"`
}

// SendResult is sendMessage's result (seed 001, extended form).
type SendResult struct {
	Success         bool   `json:"success"`
	StopPropagation bool   `json:"stopPropagation"`
	Acks            []Ack  `json:"acks"`
	MessageID       string `json:"messageId"`
}

// ProcessParams are the params of processMessage (and of sendMessage
// when the bus delivers to a client that does not know processMessage).
type ProcessParams struct {
	Topic   string          `json:"topic"`
	Payload json.RawMessage `json:"payload"`
}

// ProcessResult is what a subscriber answers to processMessage.
type ProcessResult struct {
	Processed       bool   `json:"processed"`
	ShouldRetry     bool   `json:"should_retry"`
	RetrySeconds    int    `json:"retry_seconds"`
	Message         string `json:"message,omitempty"`
	StopPropagation bool   `json:"stopPropagation"`
	// Success is the base protocol's answer to a delivered sendMessage,
	// read as Processed when Processed is absent.
	Success *bool `json:"success,omitempty"`
}

// Propagation is a subscription's propagation policy (seed 001): whether a
// message goes on to the next subscriber once this one has answered.
type Propagation string

// The propagation policies of seed 001.
const (
	// PropagationStopOnProcessed stops after a subscriber that returns
	// processed: true (or stopPropagation: true). The default.
	PropagationStopOnProcessed Propagation = "stopPropagationOnProcessed"
	// PropagationStopOnStop stops only after stopPropagation: true.
	PropagationStopOnStop Propagation = "stopPropagationOnStop"
	// PropagationContinueAll never stops.
	PropagationContinueAll Propagation = "continueAll"
)

func (p Propagation) valid() bool {
	return p == PropagationStopOnProcessed || p == PropagationStopOnStop || p == PropagationContinueAll
}

// stops applies the policy to a subscriber's answer.
func (p Propagation) stops(pr ProcessResult) bool {
	switch p {
	case PropagationContinueAll:
		return false
	case PropagationStopOnStop:
		return pr.StopPropagation
	}
	return pr.Processed || pr.StopPropagation
}
