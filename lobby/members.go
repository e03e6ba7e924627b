package lobby

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"

	"github.com/meshagent/meshagent/protocol"
)

// Typed values from clients (the message, REGISTER's capabilities, each
// string the lobby reads) are decoded by protocol.DecodeStrict. Payloads
// are also read here member by member, in document order, because the
// lobby forwards them: a REQUEST's members go on to the provider or the
// mesh without capability_name, a mesh result comes back with "status"
// first, and nothing it does not read is reordered or dropped. Duplicate
// names are refused on this path too: a lobby and an agent must never
// read the same bytes differently.

// member is one member of a JSON object, in document order.
type member struct {
	name string
	raw  json.RawMessage
}

// objectMembers splits a JSON object into its members, in order, refusing
// duplicate names: a lobby and an agent must never read the same bytes
// differently (encoding/json keeps the last duplicate and matches names
// case-insensitively; other languages differ). raw must be valid JSON.
func objectMembers(raw []byte) ([]member, error) {
	raw = trimJSONSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, errors.New("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	var out []member
	seen := make(map[string]bool)
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, ok := t.(string)
		if !ok {
			return nil, errors.New("member name is not a string")
		}
		if seen[name] {
			return nil, &duplicateError{name: name}
		}
		seen[name] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		out = append(out, member{name: name, raw: v})
	}
	if _, err := dec.Token(); err != nil { // }
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the object")
	}
	return out, nil
}

type duplicateError struct{ name string }

func (e *duplicateError) Error() string { return "duplicate member " + strconvQuote(e.name) }
func (e *duplicateError) Unwrap() error { return errDuplicateMember }

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// payloadString reads a string member of a payload; absent and null read
// as "", anything else that is not a string is an error.
func payloadString(members []member, name string) (string, bool, error) {
	for _, mb := range members {
		if mb.name != name {
			continue
		}
		if isNull(mb.raw) {
			return "", false, nil
		}
		var v string
		if protocol.DecodeStrict(mb.raw, &v) != nil {
			return "", true, protocol.Errorf(protocol.CodeInvalidMessage, "payload: %q must be a string", name)
		}
		return v, true, nil
	}
	return "", false, nil
}

// buildObject encodes first (name, value pairs already encoded) followed by
// members, leaving out any member whose name is in skip.
func buildObject(first []member, members []member, skip ...string) json.RawMessage {
	var buf bytes.Buffer
	buf.WriteByte('{')
	n := 0
	add := func(mb member) {
		if n > 0 {
			buf.WriteByte(',')
		}
		n++
		buf.WriteString(strconvQuote(mb.name))
		buf.WriteByte(':')
		buf.Write(mb.raw)
	}
	for _, mb := range first {
		add(mb)
	}
outer:
	for _, mb := range members {
		for _, s := range skip {
			if mb.name == s {
				continue outer
			}
		}
		add(mb)
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

// trimJSONSpace trims the four whitespace characters JSON allows.
func trimJSONSpace(b []byte) []byte {
	return bytes.Trim(b, " \t\r\n")
}

// marshal encodes v without HTML escaping, so payloads pass through as
// their senders wrote them.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
