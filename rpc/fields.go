package rpc

import (
	"encoding/json"

	"github.com/meshagent/meshagent/internal/jsonobj"
)

// objectFields splits raw, a valid JSON object, into its members as
// json.Unmarshal into a map[string]json.RawMessage would (a repeated key:
// the last one wins), in one pass and without copying the values. It
// reports false, and leaves the work to encoding/json, for a key that
// has an escape or a byte beyond ASCII, whose decoding it does not
// repeat.
func objectFields(raw []byte) (map[string]json.RawMessage, bool) {
	f := make(map[string]json.RawMessage, 4)
	if !jsonobj.Members(raw, func(k, v []byte) { f[string(k)] = v }) {
		return nil, false
	}
	return f, true
}
