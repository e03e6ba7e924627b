package protocol

import (
	"bytes"
	"encoding/json"
)

// decodeEnvelope decodes canonical envelope bytes that have passed
// sign.CheckCanonical and checkMembers. It walks the members directly
// instead of running encoding/json over the whole body (which scans the
// payload twice and is a tenth of a call's CPU); the payload and metadata
// are copied once. It must agree with json.Unmarshal on every input the
// two accept (TestDecodeEnvelopeMatchesJSON, FuzzDecodeEnvelopeMatchesJSON).
func decodeEnvelope(body []byte) (*Envelope, error) {
	var e Envelope
	err := eachMember(body, func(name, val []byte) error {
		var err error
		switch string(name) {
		case "from":
			err = eachMember(val, func(n, v []byte) error {
				var err error
				switch string(n) {
				case "agentId":
					e.From.AgentID, err = jsonString(v, "from.agentId")
				case "capabilities":
					e.From.Capabilities, err = jsonStrings(v, "from.capabilities")
				case "name":
					e.From.Name, err = jsonString(v, "from.name")
				}
				return err
			})
			if err == nil && val[0] != '{' && string(val) != "null" {
				err = Errorf(CodeInvalidMessage, "envelope: from must be an object")
			}
		case "id":
			e.ID, err = jsonString(val, "id")
		case "metadata":
			e.Metadata = bytes.Clone(val)
		case "payload":
			e.Payload = bytes.Clone(val)
		case "protocol":
			e.Protocol, err = jsonString(val, "protocol")
		case "timestamp":
			e.Timestamp, err = jsonString(val, "timestamp")
		case "type":
			var t string
			t, err = jsonString(val, "type")
			e.Type = MessageType(t)
		case "to":
			if string(val) == "null" {
				return nil
			}
			if val[0] != '{' {
				return Errorf(CodeInvalidMessage, "envelope: to must be an object")
			}
			e.To = &Recipient{}
			err = eachMember(val, func(n, v []byte) error {
				var err error
				switch string(n) {
				case "agentId":
					e.To.AgentID, err = jsonString(v, "to.agentId")
				case "broadcast":
					switch string(v) {
					case "true":
						e.To.Broadcast = true
					case "false", "null":
					default:
						err = Errorf(CodeInvalidMessage, "envelope: to.broadcast must be a boolean")
					}
				case "topic":
					e.To.Topic, err = jsonString(v, "to.topic")
				}
				return err
			})
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &e, nil
}

// jsonString decodes a canonical JSON string (null reads as "", as
// encoding/json has it).
func jsonString(v []byte, field string) (string, error) {
	if string(v) == "null" {
		return "", nil
	}
	if len(v) < 2 || v[0] != '"' {
		return "", Errorf(CodeInvalidMessage, "envelope: %s must be a string", field)
	}
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner), nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", Errorf(CodeInvalidMessage, "envelope: %s: %v", field, err)
	}
	return s, nil
}

func jsonStrings(v []byte, field string) ([]string, error) {
	if string(v) == "null" {
		return nil, nil
	}
	var out []string
	if err := json.Unmarshal(v, &out); err != nil {
		return nil, Errorf(CodeInvalidMessage, "envelope: %s must be an array of strings", field)
	}
	return out, nil
}
