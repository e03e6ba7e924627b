package bus

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// Seed 004's message shapes on the bus. sendMessage also takes a seed 004
// direct message, broadcast or notification object as its params, as the
// seed writes it (told apart from seed 001's {"topic","payload"} by its
// "type" and the absence of "topic"): an agent_message goes to
// agent:<to_agent_id>, a broadcast or notification to agent.broadcast, the
// object itself being the payload. In either form, a payload of one of
// those types that names a from_agent_id must name the sending client
// (its client id, or the agent id it was vouched as): the bus records the
// authenticated sender, and a claim of another is refused, never passed
// on.

// seed004Topic returns the topic a seed 004 object is sent to, and ok
// when params is one (a "type" of seed 004's and no "topic").
func seed004Topic(params json.RawMessage) (topic string, ok bool, err error) {
	var members map[string]json.RawMessage
	if json.Unmarshal(params, &members) != nil {
		return "", false, nil
	}
	var typ string
	if _, hasTopic := members["topic"]; hasTopic || json.Unmarshal(members["type"], &typ) != nil {
		return "", false, nil
	}
	switch typ {
	case rpc.SeedTypeAgentMessage:
		var to string
		if raw, ok := members["to_agent_id"]; !ok || json.Unmarshal(raw, &to) != nil || to == "" {
			return "", true, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: an agent_message needs "to_agent_id", an agent id string (seed 004)`)
		}
		id, err := sign.ParseAgentID(to)
		if err != nil {
			return "", true, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "to_agent_id": %v`, err)
		}
		return "agent:" + id.String(), true, nil
	case rpc.SeedTypeBroadcast, rpc.SeedTypeNotification:
		return rpc.SeedBroadcastTopic, true, nil
	}
	return "", false, nil
}

// checkSeedFrom refuses a seed 004 payload whose from_agent_id is not the
// sending client.
func checkSeedFrom(payload json.RawMessage, clientID string) error {
	// Most payloads name no sender: they are not decoded again. A member
	// name can be written only literally or with \u escapes.
	if !bytes.Contains(payload, []byte("from_agent_id")) && !bytes.Contains(payload, []byte(`\u`)) {
		return nil
	}
	var members map[string]json.RawMessage
	var typ string
	if json.Unmarshal(payload, &members) != nil || json.Unmarshal(members["type"], &typ) != nil {
		return nil // checkPayloadType words a payload that is not one
	}
	switch typ {
	case rpc.SeedTypeAgentMessage, rpc.SeedTypeBroadcast, rpc.SeedTypeNotification:
	default:
		return nil
	}
	raw, ok := members["from_agent_id"]
	if !ok {
		return nil
	}
	var from string
	if err := json.Unmarshal(raw, &from); err != nil {
		return rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "from_agent_id" must be a string (seed 004)`)
	}
	if from == clientID {
		return nil
	}
	if a, err := sign.ParseAgentID(from); err == nil && a.String() == clientID {
		return nil
	}
	return rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "from_agent_id" %q is not the sender (%s): the bus records who sent a message and does not pass on a claim of another`, truncate(from, 80), clientID)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// seedDirectMessage turns a seed 004 agent_message sent on the bus to a
// mesh agent into the params of that agent's direct message
// (protocol.MessageCapability); a message without its own id takes the
// bus message's.
func seedDirectMessage(msg store.Message) (json.RawMessage, error) {
	var sm rpc.SeedAgentMessage
	if err := protocol.DecodeStrict(msg.Payload, &sm); err != nil {
		return nil, fmt.Errorf("seed 004 agent_message: %w", err)
	}
	m := protocol.AgentMessage{MessageID: sm.MessageID, Subject: sm.Subject, Body: sm.Body, Priority: sm.Priority, RequiresResponse: sm.RequiresResponse, Context: sm.Context}
	if m.MessageID == "" {
		m.MessageID = msg.ID
	}
	if m.Priority == "" {
		m.Priority = protocol.PriorityNormal
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("seed 004 agent_message: %w", err)
	}
	return json.Marshal(m)
}
