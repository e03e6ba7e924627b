package protocol

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/meshagent/meshagent/sign"
)

// The hand-written encoders below produce the same bytes as
// MarshalCanonical's general path (the tests compare them), without
// re-scanning payloads that are already canonical: on the request path
// the params are checked once, not once per enclosing object.

// maxExactInt is the largest integer a double holds exactly; beyond it the
// canonical form of a number is not its decimal digits.
const maxExactInt = 1 << 53

// fastMarshal encodes the payload types of the hot path. ok is false when
// the value needs the general path.
func fastMarshal(v any) (out []byte, ok bool) {
	if n := payloadSize(v); n >= 0 {
		return appendPayload(make([]byte, 0, n), v)
	}
	switch p := v.(type) {
	case *Envelope:
		b, ok := p.appendCanonical(0)
		return b, ok
	case json.RawMessage:
		// Params and results arrive as raw JSON that is usually canonical
		// already (a peer's verified bytes, a handler's MarshalCanonical):
		// one scan instead of an encode and a canonicalisation. A copy,
		// as the slow path makes, so the caller may keep its bytes.
		if len(p) == 0 || sign.CheckCanonical(p) != nil {
			return nil, false
		}
		return bytes.Clone(p), true
	}
	return nil, false
}

// payloadSize estimates the encoded size of a payload appendPayload
// encodes, or returns -1 for one it does not.
func payloadSize(v any) int {
	switch p := v.(type) {
	case *Request:
		return requestSize(p)
	case *Response:
		return responseSize(p)
	}
	return -1
}

// appendPayload appends a payload of the hot path as fastMarshal encodes
// it. ok is false when it needs the general path.
func appendPayload(b []byte, v any) ([]byte, bool) {
	switch p := v.(type) {
	case *Request:
		return appendRequest(b, p)
	case *Response:
		return appendResponse(b, p)
	}
	return nil, false
}

func requestSize(p *Request) int { return 64 + len(p.Action) + len(p.CorrelationID) + len(p.Params) }

// appendRequest appends p's canonical form; ok is false when p.Params is
// not canonical.
func appendRequest(b []byte, p *Request) ([]byte, bool) {
	if !rawCanonical(p.Params) || p.Timeout >= maxExactInt || p.Timeout <= -maxExactInt || p.Detach >= maxExactInt || p.Detach <= -maxExactInt {
		return nil, false
	}
	ok := true
	b = append(b, `{"action":`...)
	if b, ok = appendString(b, p.Action); !ok {
		return nil, false
	}
	b = append(b, `,"correlationId":`...)
	if b, ok = appendString(b, p.CorrelationID); !ok {
		return nil, false
	}
	if p.Detach != 0 {
		b = append(b, `,"detach":`...)
		b = strconv.AppendInt(b, p.Detach, 10)
	}
	if len(p.Params) > 0 {
		b = append(b, `,"params":`...)
		b = append(b, p.Params...)
	}
	if p.Timeout != 0 {
		b = append(b, `,"timeout":`...)
		b = strconv.AppendInt(b, p.Timeout, 10)
	}
	return append(b, '}'), true
}

func responseSize(p *Response) int { return 64 + len(p.CorrelationID) + len(p.Result) }

// appendResponse appends p's canonical form; ok is false when p.Result is
// not canonical.
func appendResponse(b []byte, p *Response) ([]byte, bool) {
	if !rawCanonical(p.Result) {
		return nil, false
	}
	ok := true
	b = append(b, `{"correlationId":`...)
	if b, ok = appendString(b, p.CorrelationID); !ok {
		return nil, false
	}
	if len(p.Result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, p.Result...)
	}
	b = append(b, `,"status":`...)
	if b, ok = appendString(b, string(p.Status)); !ok {
		return nil, false
	}
	return append(b, '}'), true
}

// rawCanonical reports whether raw is absent or canonical JSON.
func rawCanonical(raw json.RawMessage) bool {
	return len(raw) == 0 || sign.CheckCanonical(raw) == nil
}

// appendCanonical encodes the envelope with the field order and omitempty
// rules of its struct tags, after headroom zero bytes that SealFrame fills
// with the frame prefix and signature.
func (e *Envelope) appendCanonical(headroom int) ([]byte, bool) {
	b, _, _, ok := e.appendCanonicalWith(nil, headroom, nil)
	return b, ok
}

// appendCanonicalWith is appendCanonical, with the payload encoded from
// payload (appendPayload) in place of e.Payload unless payload is nil,
// in into's array if it has room for the estimated size. The payload's
// bytes are b[pa:pz].
func (e *Envelope) appendCanonicalWith(into []byte, headroom int, payload any) (b []byte, pa, pz int, ok bool) {
	plen := len(e.Payload)
	if payload != nil {
		plen = payloadSize(payload)
	} else if !rawCanonical(e.Payload) {
		return nil, 0, 0, false
	}
	if plen <= 0 || !rawCanonical(e.Metadata) {
		return nil, 0, 0, false
	}
	est := headroom + 320 + plen + len(e.Metadata) + len(e.From.Name) + len(e.ID) + len(e.Timestamp)
	for _, c := range e.From.Capabilities {
		est += len(c) + 3
	}
	if e.To != nil {
		est += len(e.To.AgentID) + len(e.To.Topic)
	}
	if cap(into) >= est {
		b = into[:headroom] // the headroom is overwritten or cut off
	} else {
		b = make([]byte, headroom, est)
	}
	b = append(b, `{"from":{"agentId":`...)
	if b, ok = appendString(b, e.From.AgentID); !ok {
		return nil, 0, 0, false
	}
	if len(e.From.Capabilities) > 0 {
		b = append(b, `,"capabilities":[`...)
		for i, c := range e.From.Capabilities {
			if i > 0 {
				b = append(b, ',')
			}
			if b, ok = appendString(b, c); !ok {
				return nil, 0, 0, false
			}
		}
		b = append(b, ']')
	}
	if e.From.Name != "" {
		b = append(b, `,"name":`...)
		if b, ok = appendString(b, e.From.Name); !ok {
			return nil, 0, 0, false
		}
	}
	b = append(b, `},"id":`...)
	if b, ok = appendString(b, e.ID); !ok {
		return nil, 0, 0, false
	}
	if len(e.Metadata) > 0 {
		b = append(b, `,"metadata":`...)
		b = append(b, e.Metadata...)
	}
	b = append(b, `,"payload":`...)
	pa = len(b)
	if payload == nil {
		b = append(b, e.Payload...)
	} else if b, ok = appendPayload(b, payload); !ok {
		return nil, 0, 0, false
	}
	pz = len(b)
	b = append(b, `,"protocol":`...)
	if b, ok = appendString(b, e.Protocol); !ok {
		return nil, 0, 0, false
	}
	if e.Signature != "" {
		b = append(b, `,"signature":`...)
		if b, ok = appendString(b, e.Signature); !ok {
			return nil, 0, 0, false
		}
	}
	b = append(b, `,"timestamp":`...)
	if b, ok = appendString(b, e.Timestamp); !ok {
		return nil, 0, 0, false
	}
	if e.To != nil {
		b = append(b, `,"to":{`...)
		comma := false
		if e.To.AgentID != "" {
			b = append(b, `"agentId":`...)
			if b, ok = appendString(b, e.To.AgentID); !ok {
				return nil, 0, 0, false
			}
			comma = true
		}
		if comma {
			b = append(b, ',')
		}
		b = append(b, `"broadcast":`...)
		b = strconv.AppendBool(b, e.To.Broadcast)
		if e.To.Topic != "" {
			b = append(b, `,"topic":`...)
			if b, ok = appendString(b, e.To.Topic); !ok {
				return nil, 0, 0, false
			}
		}
		b = append(b, '}')
	}
	b = append(b, `,"type":`...)
	if b, ok = appendString(b, string(e.Type)); !ok {
		return nil, 0, 0, false
	}
	return append(b, '}'), pa, pz, true
}

// appendString appends s as an RFC 8785 string. It refuses invalid UTF-8
// (ok false), leaving that case to the general path's error.
func appendString(b []byte, s string) ([]byte, bool) {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				return nil, false
			}
			i += size
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			i++
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"':
			b = append(b, '\\', '"')
		case '\\':
			b = append(b, '\\', '\\')
		case '\b':
			b = append(b, '\\', 'b')
		case '\f':
			b = append(b, '\\', 'f')
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			const hex = "0123456789abcdef"
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		i++
		start = i
	}
	b = append(b, s[start:]...)
	return append(b, '"'), true
}
