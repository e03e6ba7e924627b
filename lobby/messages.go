package lobby

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/meshagent/meshagent/protocol"
)

// DefaultID is the lobby's own agent id (seed 000 §2): the
// receiver_id of REGISTER and DISCOVER_SERVICES, and the sender_id of
// everything the lobby itself says.
const DefaultID = "global_lobby"

// Seed 000's message types (§4).
const (
	TypeRegister          = "REGISTER"
	TypeRegisterAck       = "REGISTER_ACK"
	TypeDiscoverServices  = "DISCOVER_SERVICES"
	TypeServicesAvailable = "SERVICES_AVAILABLE"
	TypeRequest           = "REQUEST"
	TypeResponse          = "RESPONSE"
	TypeError             = "ERROR"
)

// RegisterStatus is the status of a REGISTER_ACK (seed 000 §4.2).
const RegisterStatus = "success_registered_finalized"

// Lobby message bounds: ids (sender_id, receiver_id, conversation_id) and
// tokens longer than MaxIDLen bytes are refused, and so is a
// REGISTER with more than MaxCapabilities capabilities.
const (
	MaxIDLen        = 256
	MaxCapabilities = 256
)

// Message is seed 000's message (§3), one per WebSocket text
// message. Fields are encoded in the seed's order. The lobby never sends
// an auth_token in this field: a forwarded REQUEST or RESPONSE has the
// sender's token removed, and the only token the lobby sends is the one a
// REGISTER_ACK carries in its payload.
type Message struct {
	// SenderID is the agent_id of the sender; DefaultID for what the
	// lobby says itself.
	SenderID string `json:"sender_id"`
	// ReceiverID is the agent_id of the receiver, or DefaultID.
	ReceiverID string `json:"receiver_id"`
	// MessageType is one of the Type* message types.
	MessageType string `json:"message_type"`
	// Payload is a JSON object; ParseMessage reads an absent or null
	// payload as {}.
	Payload json.RawMessage `json:"payload"`
	// ConversationID correlates a REQUEST with its RESPONSE; optional
	// elsewhere, and echoed in the lobby's answers.
	ConversationID string `json:"conversation_id,omitempty"`
	// AuthToken is the sender's token from REGISTER_ACK; absent or null
	// only in a REGISTER.
	AuthToken string `json:"auth_token,omitempty"`
}

// RegisterPayload is the payload of REGISTER (§4.1).
type RegisterPayload struct {
	Capabilities []protocol.Capability `json:"capabilities"`
}

// RegisterAckPayload is the payload of REGISTER_ACK (§4.2).
type RegisterAckPayload struct {
	Status    string `json:"status"`
	LobbyID   string `json:"lobby_id"`
	AuthToken string `json:"auth_token"`
}

// DiscoverServicesPayload is the payload of DISCOVER_SERVICES (§4.3):
// a capability name, keywords (the seed's "alternative: search by
// keywords"), or both; at least one.
type DiscoverServicesPayload struct {
	CapabilityName string   `json:"capability_name,omitempty"`
	QueryKeywords  []string `json:"query_keywords,omitempty"`
}

// ServiceFound is one entry of SERVICES_AVAILABLE: an agent and its
// capabilities that match the query.
type ServiceFound struct {
	AgentID              string                `json:"agent_id"`
	RelevantCapabilities []protocol.Capability `json:"relevant_capabilities"`
}

// ServicesAvailablePayload is the payload of SERVICES_AVAILABLE (§4.4).
type ServicesAvailablePayload struct {
	ServicesFound           []ServiceFound `json:"services_found"`
	DiscoveredForCapability string         `json:"discovered_for_capability"`
	// DiscoveredForKeywords echoes DISCOVER_SERVICES's query_keywords
	// (meshagent's addition, absent when there were none).
	DiscoveredForKeywords []string `json:"discovered_for_keywords,omitempty"`
}

// ErrorPayload is the payload of ERROR (§4.7). Code, an AgentProtocol
// error code, is meshagent's addition (the seed leaves room for "more
// sophisticated error codes"); clients that only read error are not
// disturbed by it.
type ErrorPayload struct {
	Error                  string        `json:"error"`
	Code                   protocol.Code `json:"code,omitempty"`
	OriginalMessageType    string        `json:"original_message_type,omitempty"`
	OriginalConversationID string        `json:"original_conversation_id,omitempty"`
}

// ErrorResponse is the payload of a RESPONSE with status "error"
// (§4.6, §8): what a requester receives when its REQUEST is refused
// (UNAUTHORIZED, CAPABILITY_NOT_SUPPORTED, UNKNOWN_AGENT), times out, or
// fails in the mesh. Code and Details are meshagent's additions.
type ErrorResponse struct {
	Status  protocol.Status `json:"status"`
	Error   string          `json:"error"`
	Code    protocol.Code   `json:"code,omitempty"`
	Details json.RawMessage `json:"details,omitempty"`
}

// wireMessage is a Message as a client sends it, each member raw, so
// that the fields an ERROR reply echoes are read even when another one
// is wrong.
type wireMessage struct {
	SenderID       json.RawMessage `json:"sender_id"`
	ReceiverID     json.RawMessage `json:"receiver_id"`
	MessageType    json.RawMessage `json:"message_type"`
	Payload        json.RawMessage `json:"payload"`
	ConversationID json.RawMessage `json:"conversation_id"`
	AuthToken      json.RawMessage `json:"auth_token"`
}

func ParseMessage(frame []byte) (*Message, error) {
	if !utf8.Valid(frame) {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "malformed message: not valid UTF-8")
	}
	if !json.Valid(frame) {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "malformed message: not JSON")
	}
	if f := trimJSONSpace(frame); f[0] != '{' {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "malformed message: not a JSON object")
	}
	// Members other than the six are tolerated: see above.
	var w wireMessage
	if err := protocol.DecodeStrict(frame, &w, protocol.AllowUnknown()); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "malformed message: %v", err)
	}
	m := &Message{}
	// Read the fields an ERROR reply echoes first, so they are known
	// whatever else is wrong.
	var errs []error
	str := func(name string, raw json.RawMessage, dst *string) {
		if len(raw) == 0 || isNull(raw) {
			return
		}
		var v string
		if protocol.DecodeStrict(raw, &v) != nil {
			errs = append(errs, protocol.Errorf(protocol.CodeInvalidMessage, "malformed message: %q must be a string", name))
			return
		}
		if len(v) > MaxIDLen {
			errs = append(errs, protocol.Errorf(protocol.CodeInvalidMessage, "malformed message: %q is longer than %d bytes", name, MaxIDLen))
			return
		}
		*dst = v
	}
	str("message_type", w.MessageType, &m.MessageType)
	str("conversation_id", w.ConversationID, &m.ConversationID)
	str("sender_id", w.SenderID, &m.SenderID)
	str("receiver_id", w.ReceiverID, &m.ReceiverID)
	str("auth_token", w.AuthToken, &m.AuthToken)
	if len(errs) > 0 {
		return m, errs[0]
	}
	if m.MessageType == "" {
		return m, protocol.Errorf(protocol.CodeInvalidMessage, `malformed message: "message_type" is required`)
	}
	switch p := w.Payload; {
	case len(p) == 0 || isNull(p):
		m.Payload = json.RawMessage(`{}`)
	case p[0] != '{':
		return m, protocol.Errorf(protocol.CodeInvalidMessage, `malformed message: "payload" must be an object`)
	default:
		if _, err := objectMembers(p); err != nil {
			return m, protocol.Errorf(protocol.CodeInvalidMessage, "malformed message: payload: %v", err)
		}
		m.Payload = p
	}
	return m, nil
}

// encodeMessage encodes m for the wire, without HTML escaping.
func encodeMessage(m *Message) ([]byte, error) {
	if len(m.Payload) == 0 {
		m.Payload = json.RawMessage(`{}`)
	}
	return marshal(m)
}
