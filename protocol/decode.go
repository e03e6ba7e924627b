package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
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

// DecodePayload decodes a JSON value received from the network (an
// envelope's payload, a request's params, a response's result) into v with
// DecodeStrict: member names are exact, duplicates are refused and the JSON
// type of every member v declares is checked. A wrong type (a number where
// a string belongs, a string where an object does) is an INVALID_MESSAGE
// *Error naming the member, for example
// `request payload: member "action" must be a string, not a number`.
// Members v does not declare are skipped, so that peers may add extensions
// (seed 002); v's own checks decide what is required. what names the value
// in messages. A missing value (nil or empty raw) is an error; JSON null
// leaves v unchanged.
func DecodePayload(raw []byte, what string, v any) error {
	if len(raw) == 0 {
		return Errorf(CodeInvalidMessage, "%s is missing", what)
	}
	err := DecodeStrict(raw, v, AllowUnknown())
	if err == nil {
		return nil
	}
	var fe *FieldError
	if !errors.As(err, &fe) {
		return Errorf(CodeInvalidMessage, "%s: %v", what, err)
	}
	switch {
	case fe.Err == ErrWrongType && fe.Field == "":
		return Errorf(CodeInvalidMessage, "%s must be %s, not %s", what, fe.Want, fe.Got)
	case fe.Err == ErrWrongType:
		return Errorf(CodeInvalidMessage, "%s: member %q must be %s, not %s", what, truncate(fe.Field, 80), fe.Want, fe.Got)
	case fe.Err == ErrSyntax:
		return Errorf(CodeInvalidMessage, "%s is not valid JSON: %s", what, truncate(fe.Reason, 200))
	}
	// Errors from a type's own UnmarshalJSON (time.Time, say) keep their
	// text; they never carry more than a short quote of the input.
	return Errorf(CodeInvalidMessage, "%s: %s", what, truncate(fe.Error(), 200))
}

// jsonKind names the JSON type of a json.UnmarshalTypeError's Value
// ("number", "number 1.5", "string", "bool", "array", "object").
func jsonKind(value string) string {
	switch {
	case strings.HasPrefix(value, "number"):
		if value != "number" {
			return "a non-integer or out-of-range number"
		}
		return "a number"
	case value == "bool":
		return "a boolean"
	case value == "array", value == "object":
		return "an " + value
	case value == "string":
		return "a string"
	}
	return truncate(value, 40)
}

// wantKind names the JSON type that decodes into t.
func wantKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "another type"
}
