package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Seed 004's message shapes, taken as written by mesh.sendMessage: its
// params may be a seed 004 direct message, broadcast or notification
// object (told apart by "type") instead of {"agentId","message"}.
//
// from_agent_id, when present, must name this node's agent (its peer ID or
// base64 public key): a client of the local API speaks as the node, and
// a message that claims another sender is refused, never passed on with
// the claim. The receiver learns the sender from the signature, not from
// this member.
const (
	// SeedTypeAgentMessage is seed 004's direct message.
	SeedTypeAgentMessage = "agent_message"
	// SeedTypeBroadcast is seed 004's broadcast, published on
	// SeedBroadcastTopic with its filter.
	SeedTypeBroadcast = "broadcast"
	// SeedTypeNotification is seed 004's notification; with "broadcast":
	// true it goes to SeedBroadcastTopic as well.
	SeedTypeNotification = "notification"
	// SeedBroadcastTopic is seed 004's broadcast topic.
	SeedBroadcastTopic = "agent.broadcast"
)

// SeedAgentMessage is seed 004's direct message as written.
type SeedAgentMessage struct {
	Type             string          `json:"type"`
	FromAgentID      string          `json:"from_agent_id,omitempty"`
	ToAgentID        string          `json:"to_agent_id"`
	MessageID        string          `json:"message_id,omitempty"`
	Subject          string          `json:"subject,omitempty"`
	Body             string          `json:"body,omitempty"`
	Priority         string          `json:"priority,omitempty"`
	RequiresResponse bool            `json:"requires_response,omitempty"`
	Context          json.RawMessage `json:"context,omitempty"`
	Timestamp        string          `json:"timestamp,omitempty"`
}

// SeedBroadcast is seed 004's broadcast as written. Its filter takes
// persona_types and exclude_agents (seed 004), include_agents and
// capabilities; topics is accepted and not used for routing (every
// broadcast goes to SeedBroadcastTopic).
type SeedBroadcast struct {
	Type        string          `json:"type"`
	FromAgentID string          `json:"from_agent_id,omitempty"`
	MessageID   string          `json:"message_id,omitempty"`
	Subject     string          `json:"subject,omitempty"`
	Body        string          `json:"body,omitempty"`
	Filter      *SeedFilter     `json:"filter,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Timestamp   string          `json:"timestamp,omitempty"`
}

// SeedFilter is a seed 004 broadcast filter.
type SeedFilter struct {
	PersonaTypes  []string `json:"persona_types,omitempty"`
	ExcludeAgents []string `json:"exclude_agents,omitempty"`
	IncludeAgents []string `json:"include_agents,omitempty"`
	Capabilities  []string `json:"capabilities,omitempty"`
	Topics        []string `json:"topics,omitempty"`
}

// SeedNotification is seed 004's notification as written.
type SeedNotification struct {
	Type             string          `json:"type"`
	FromAgentID      string          `json:"from_agent_id,omitempty"`
	Broadcast        bool            `json:"broadcast"`
	MessageID        string          `json:"message_id,omitempty"`
	NotificationType string          `json:"notification_type"`
	Payload          json.RawMessage `json:"payload,omitempty"`
	Timestamp        string          `json:"timestamp,omitempty"`
}

// SeedSendResult answers a seed 004 shape, in the seed's member names:
// the message's type and id, "delivered", "queued" (the agent is away; the
// node's outbox holds it) or "published", the receiver's response when it
// gave one, and for a broadcast how many topic peers it went to.
type SeedSendResult struct {
	Type        string          `json:"type"`
	MessageID   string          `json:"message_id"`
	ToAgentID   string          `json:"to_agent_id,omitempty"`
	Status      string          `json:"status"`
	DeliveredAt string          `json:"delivered_at,omitempty"`
	Response    json.RawMessage `json:"response,omitempty"`
	Peers       *int            `json:"peers,omitempty"`
}

// seedType returns params' top-level "type" member, "" when it has none
// (the {"agentId","message"} form) or params is not an object.
func seedType(params json.RawMessage) string {
	var probe map[string]json.RawMessage
	if json.Unmarshal(params, &probe) != nil {
		return ""
	}
	raw, ok := probe["type"]
	if !ok {
		return "-" // not a seed shape
	}
	var t string
	if json.Unmarshal(raw, &t) != nil || t == "" {
		return "?"
	}
	return t
}

// SeedShape reports whether params is one of seed 004's message objects
// (its "type" is agent_message, broadcast or notification), and which.
func SeedShape(params json.RawMessage) (string, bool) {
	switch t := seedType(params); t {
	case SeedTypeAgentMessage, SeedTypeBroadcast, SeedTypeNotification:
		return t, true
	}
	return "", false
}

// checkFrom refuses a from_agent_id that is not this node's agent.
func (s *Server) checkFrom(from string) error {
	if from == "" {
		return nil
	}
	id, err := sign.ParseAgentID(from)
	if err != nil || id.String() != s.mesh.AgentID() {
		return Errorf(CodeInvalidParams, `invalid params: "from_agent_id" %q is not this agent (%s): a client of the local API sends as its node, and may not claim another sender`, truncateID(from), s.mesh.AgentID())
	}
	return nil
}

func truncateID(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// seedSend serves mesh.sendMessage given one of seed 004's shapes.
func (s *Server) seedSend(ctx context.Context, typ string, params json.RawMessage) (any, error) {
	switch typ {
	case SeedTypeAgentMessage:
		return s.seedDirect(ctx, params)
	case SeedTypeBroadcast:
		return s.seedBroadcast(ctx, params)
	case SeedTypeNotification:
		return s.seedNotification(ctx, params)
	}
	return nil, Errorf(CodeInvalidParams, `invalid params: "type" must be %q, %q or %q (seed 004), or leave it out and send {"agentId","message"}`, SeedTypeAgentMessage, SeedTypeBroadcast, SeedTypeNotification)
}

func (s *Server) seedDirect(ctx context.Context, params json.RawMessage) (any, error) {
	var sm SeedAgentMessage
	if err := decodeStrict(params, &sm); err != nil {
		return nil, Errorf(CodeInvalidParams, "invalid params: %v", err)
	}
	if err := s.checkFrom(sm.FromAgentID); err != nil {
		return nil, err
	}
	if sm.ToAgentID == "" {
		return nil, Errorf(CodeInvalidParams, `invalid params: "to_agent_id" is required`)
	}
	to, err := sign.ParseAgentID(sm.ToAgentID)
	if err != nil {
		return nil, Errorf(CodeInvalidParams, `invalid params: "to_agent_id": %v`, err)
	}
	if sm.Timestamp != "" {
		if _, err := time.Parse(time.RFC3339Nano, sm.Timestamp); err != nil {
			return nil, Errorf(CodeInvalidParams, `invalid params: "timestamp" %q is not ISO 8601 (RFC 3339)`, truncateID(sm.Timestamp))
		}
	}
	m := protocol.AgentMessage{MessageID: sm.MessageID, Subject: sm.Subject, Body: sm.Body, Priority: sm.Priority, RequiresResponse: sm.RequiresResponse, Context: sm.Context}
	if m.MessageID == "" {
		m.MessageID = protocol.NewID()
	}
	if m.Priority == "" {
		m.Priority = protocol.PriorityNormal
	}
	if err := m.Validate(); err != nil {
		return nil, Errorf(CodeInvalidParams, "invalid params: %v", err)
	}
	out := SeedSendResult{Type: SeedTypeAgentMessage, MessageID: m.MessageID, ToAgentID: to.String()}
	res, err := s.cfg.Provider.SendMessage(ctx, to.String(), m)
	switch {
	case errors.Is(err, ErrQueued):
		out.Status = "queued"
		return out, nil
	case err != nil:
		return nil, sendError(m.MessageID, out.ToAgentID, err)
	}
	out.Status, out.DeliveredAt = "delivered", time.Now().UTC().Format(time.RFC3339Nano)
	if len(res) > 0 && !isNull(res) {
		out.Response = res
	}
	return out, nil
}

func (s *Server) seedBroadcast(ctx context.Context, params json.RawMessage) (any, error) {
	var b SeedBroadcast
	if err := decodeStrict(params, &b); err != nil {
		return nil, Errorf(CodeInvalidParams, "invalid params: %v", err)
	}
	if err := s.checkFrom(b.FromAgentID); err != nil {
		return nil, err
	}
	if b.Subject == "" && b.Body == "" && len(b.Payload) == 0 {
		return nil, Errorf(CodeInvalidParams, "invalid params: a broadcast needs a subject, a body or a payload")
	}
	var filter *protocol.Filter
	if f := b.Filter; f != nil {
		filter = &protocol.Filter{PersonaTypes: f.PersonaTypes, Capabilities: f.Capabilities}
		for _, list := range []struct {
			name string
			in   []string
			out  *[]string
		}{{"exclude_agents", f.ExcludeAgents, &filter.ExcludeAgents}, {"include_agents", f.IncludeAgents, &filter.IncludeAgents}} {
			for _, a := range list.in {
				// Receivers compare peer IDs; a name that is no agent id
				// (seed 004's "agent-housekeeping-bot-1") matches nobody.
				if id, err := sign.ParseAgentID(a); err == nil {
					a = id.String()
				}
				*list.out = append(*list.out, a)
			}
		}
	}
	if b.MessageID == "" {
		b.MessageID = protocol.NewID()
	}
	if b.Timestamp == "" {
		b.Timestamp = time.Now().UTC().Format(time.RFC3339)
	}
	b.FromAgentID = s.mesh.AgentID()
	return s.seedPublish(ctx, SeedTypeBroadcast, b.MessageID, b, filter)
}

func (s *Server) seedNotification(ctx context.Context, params json.RawMessage) (any, error) {
	var nt SeedNotification
	if err := decodeStrict(params, &nt); err != nil {
		return nil, Errorf(CodeInvalidParams, "invalid params: %v", err)
	}
	if err := s.checkFrom(nt.FromAgentID); err != nil {
		return nil, err
	}
	if nt.NotificationType == "" {
		return nil, Errorf(CodeInvalidParams, `invalid params: "notification_type" is required (seed 004: bead_completed, pr_opened, …)`)
	}
	if !nt.Broadcast {
		return nil, Errorf(CodeInvalidParams, `invalid params: a notification goes to every agent ("broadcast": true); to one agent send an agent_message`)
	}
	if nt.MessageID == "" {
		nt.MessageID = protocol.NewID()
	}
	if nt.Timestamp == "" {
		nt.Timestamp = time.Now().UTC().Format(time.RFC3339)
	}
	nt.FromAgentID = s.mesh.AgentID()
	return s.seedPublish(ctx, SeedTypeNotification, nt.MessageID, nt, nil)
}

// seedPublish publishes a seed 004 broadcast or notification, as the seed
// writes it with from_agent_id set to this agent, on SeedBroadcastTopic.
func (s *Server) seedPublish(ctx context.Context, typ, id string, msg any, filter *protocol.Filter) (any, error) {
	pub := s.cfg.Topics
	if pub == nil {
		return nil, Errorf(CodeMethodNotFound, "this node has no topics: a %s cannot be sent", typ)
	}
	payload, err := json.Marshal(msg)
	if err != nil {
		return nil, Errorf(CodeInternalError, "encode the %s: %v", typ, err)
	}
	ctx, cancel := context.WithTimeout(ctx, DefaultPublishTimeout)
	defer cancel()
	n, err := pub.Publish(ctx, SeedBroadcastTopic, payload, filter)
	switch {
	case errors.Is(err, protocol.ErrNoPeers):
		return nil, Errorf(CodeNoPeers, "no agent subscribes to %q: %v", SeedBroadcastTopic, err)
	case err != nil:
		return nil, protocol.AsError(err)
	}
	return SeedSendResult{Type: typ, MessageID: id, Status: "published", Peers: &n}, nil
}
