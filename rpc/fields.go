package rpc

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/meshagent/meshagent/internal/jsonobj"
)

// envelope is the members of a JSON-RPC object the codec looks at, as
// written (nil when absent), and which of them were present.
type envelope struct {
	version, id, method, params, result, err json.RawMessage

	hasVersion, hasID, hasMethod, hasResult, hasError bool
}

// set records member k; a repeated member replaces the earlier one, as
// encoding/json does.
func (e *envelope) set(k string, v json.RawMessage) {
	switch k {
	case "jsonrpc":
		e.version, e.hasVersion = v, true
	case "id":
		e.id, e.hasID = v, true
	case "method":
		e.method, e.hasMethod = v, true
	case "params":
		e.params = v
	case "result":
		e.result, e.hasResult = v, true
	case "error":
		e.err, e.hasError = v, true
	}
}

// objectEnvelope reads raw, a valid JSON object, as json.Unmarshal into a
// map[string]json.RawMessage would (a repeated key: the last one wins),
// in one pass and without copying the values: the walk of jsonobj, or
// encoding/json for a key that the walk does not take as written. It
// reports false when raw is not an object.
func objectEnvelope(raw []byte) (envelope, bool) {
	var e envelope
	if jsonobj.Members(raw, func(k, v []byte) { e.set(string(k), v) }) {
		return e, true
	}
	var f map[string]json.RawMessage
	if json.Unmarshal(raw, &f) != nil || f == nil {
		return envelope{}, false
	}
	e = envelope{}
	for k, v := range f {
		e.set(k, v)
	}
	return e, true
}

// plainJSONString returns the string raw encodes when it is written
// without escapes, of valid UTF-8: what json.Unmarshal would make of it
// without its pass. ok is false for anything else.
func plainJSONString(raw []byte) (s string, ok bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	body := raw[1 : len(raw)-1]
	for _, c := range body {
		if c == '\\' || c < 0x20 || c == '"' {
			return "", false
		}
	}
	if !utf8.Valid(body) {
		return "", false
	}
	return string(body), true
}

// jsonString decodes raw as a JSON string, in one step when it is plain.
func jsonString(raw []byte) (string, error) {
	if s, ok := plainJSONString(raw); ok {
		return s, nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
}
