package relay

import "encoding/json"

// DecodeForTest decodes a message as the server would and returns the JSON
// of every error response it earns, so fuzzing needs no connection.
func DecodeForTest(msg []byte) [][]byte {
	reqs, _, fatal := decodeMessage(msg, 100)
	var out [][]byte
	if fatal != nil {
		b, _ := json.Marshal(fatal)
		out = append(out, b)
	}
	for _, d := range reqs {
		if d.bad != nil {
			b, _ := json.Marshal(d.bad)
			out = append(out, b)
		}
	}
	return out
}
