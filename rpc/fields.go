package rpc

import (
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// envelope is the members of a JSON-RPC object the codec looks at, as
// written (nil when absent), read in one pass that also checks the
// object's syntax and UTF-8.
type envelope struct {
	Version jsontext.Value `json:"jsonrpc"`
	ID      jsontext.Value `json:"id"`
	Method  jsontext.Value `json:"method"`
	Params  jsontext.Value `json:"params"`
	Result  jsontext.Value `json:"result"`
	Error   jsontext.Value `json:"error"`
}

// frameOpts reads a frame as JSON-RPC peers have always been read: a
// repeated member replaces the earlier one (params are decoded strictly,
// duplicates refused, by the method's own decoder).
var frameOpts = jsontext.AllowDuplicateNames(true)

// objectEnvelope reads raw, which must be one JSON object, into its
// members. It reports a *jsontext.SyntacticError for malformed JSON or
// invalid UTF-8, and a *json.SemanticError when raw is not an object.
func objectEnvelope(raw []byte) (envelope, error) {
	var e envelope
	err := jsonv2.Unmarshal(raw, &e, frameOpts)
	return e, err
}

// jsonString decodes raw as a JSON string.
func jsonString(raw []byte) (string, error) {
	var s string
	err := jsonv2.Unmarshal(raw, &s)
	return s, err
}
