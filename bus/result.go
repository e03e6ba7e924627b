package bus

import (
	"encoding/json"
	"strings"

	"github.com/meshagent/meshagent/internal/jsonobj"
)

// A sender reads a SendResult for every message it sends, and with ten
// subscribers encoding/json spent as much CPU on it as the bus on its
// whole fan-out's answers. As for a subscriber's answer, the usual
// result (the members as the bus encodes them, plain values, strings
// without escapes) is read in one walk, and anything else goes to
// encoding/json.

// UnmarshalJSON decodes data, valid JSON as encoding/json hands it over,
// into r exactly as encoding/json decodes a SendResult without this
// method: the same values, and the same errors.
func (r *SendResult) UnmarshalJSON(data []byte) error {
	if r.zero() {
		var t SendResult
		if readSendResult(data, &t) {
			*r = t
			return nil
		}
	}
	// Named as the type it stands for, so that an error names a field as
	// SendResult.acks, as it did before this method.
	type SendResult struct {
		Success         bool   `json:"success"`
		StopPropagation bool   `json:"stopPropagation"`
		Acks            []Ack  `json:"acks"`
		MessageID       string `json:"messageId"`
	}
	return json.Unmarshal(data, (*SendResult)(r))
}

// zero reports whether r holds nothing: encoding/json decodes into what
// a value already holds (an ack it has no member for keeps its fields),
// which the walk does not repeat.
func (r *SendResult) zero() bool {
	return !r.Success && !r.StopPropagation && r.Acks == nil && r.MessageID == ""
}

// sendResultKeys and ackKeys are the members of a SendResult and an Ack
// as encoded.
var (
	sendResultKeys = []string{"success", "stopPropagation", "acks", "messageId"}
	ackKeys        = []string{"client_id", "processed", "message", "retrying", "queued", "receipt"}
)

// readSendResult is the one-walk reading of raw into r, a zero
// SendResult. It reports false, leaving r to be dropped, for anything it
// does not read exactly as encoding/json would.
func readSendResult(raw []byte, r *SendResult) bool {
	acks := false
	return readMembers(raw, func(k, v []byte) bool {
		switch string(k) {
		case "success":
			return readBool(v, &r.Success)
		case "stopPropagation":
			return readBool(v, &r.StopPropagation)
		case "messageId":
			return readString(v, &r.MessageID)
		case "acks":
			// A second acks would decode into the first one's acks.
			if acks {
				return false
			}
			acks = true
			return readAcks(v, &r.Acks)
		}
		return !foldsTo(k, sendResultKeys)
	})
}

// readAcks reads an array of acks into a nil *acks.
func readAcks(raw []byte, acks *[]Ack) bool {
	n := 0
	if !jsonobj.Elements(raw, func([]byte) { n++ }) {
		return false
	}
	ok := true
	out := make([]Ack, 0, n)
	walked := jsonobj.Elements(raw, func(v []byte) {
		if !ok {
			return
		}
		var a Ack
		ok = readAck(v, &a)
		out = append(out, a)
	})
	if !walked || !ok {
		return false
	}
	*acks = out
	return true
}

// readAck reads one ack into a, a zero Ack.
func readAck(raw []byte, a *Ack) bool {
	return readMembers(raw, func(k, v []byte) bool {
		switch string(k) {
		case "client_id":
			return readString(v, &a.ClientID)
		case "processed":
			return readBool(v, &a.Processed)
		case "message":
			return readString(v, &a.Message)
		case "retrying":
			return readBool(v, &a.Retrying)
		case "queued":
			return readBool(v, &a.Queued)
		case "receipt":
			if string(v) == "null" {
				a.Receipt = nil
				return true
			}
			// What json.RawMessage's UnmarshalJSON keeps: a copy.
			rm := json.RawMessage(append([]byte(nil), v...))
			a.Receipt = &rm
			return true
		}
		return !foldsTo(k, ackKeys)
	})
}

// foldsTo reports whether encoding/json, which matches keys regardless of
// case, would take the key k for one of keys.
func foldsTo(k []byte, keys []string) bool {
	for _, known := range keys {
		if strings.EqualFold(string(k), known) {
			return true
		}
	}
	return false
}
