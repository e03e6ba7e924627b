package rpc

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"sync"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// The codec: one WebSocket message (a frame, below) carries one JSON-RPC
// object or one batch. Decoding never fails as a whole except for a parse
// error or a bad batch; each element otherwise becomes a message or the
// error response it earns, so one bad element never hides the others.

// msgKind classifies a decoded object.
type msgKind uint8

const (
	kindRequest      msgKind = iota + 1 // method and id: answer it
	kindNotification                    // method, no id: never answer it
	kindResponse                        // result or error: answers a request we sent
)

// message is one well-formed JSON-RPC 2.0 object read from the wire.
type message struct {
	kind   msgKind
	ID     json.RawMessage // as sent (so it is echoed byte for byte); "null" is a valid request id
	Method string
	Params json.RawMessage // nil when absent or null
	Result json.RawMessage
	Error  *Error
}

// item is one decoded element of a frame: a message, or (bad != nil) the
// error response an invalid request earns, or neither for a response
// without an id, which is dropped: answering a response could loop.
type item struct {
	msg *message
	bad *response
}

// response is an outgoing (or, in the client, incoming) JSON-RPC response.
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// Encoded is params already encoded as compact JSON (an object or an
// array), sent as it is by Conn.Call and Conn.Notify: one message going
// to many clients is encoded once. The caller vouches for it; nothing
// checks it again.
type Encoded []byte

// MarshalJSON returns e itself, so that Encoded inside other values
// encodes as the JSON it holds.
func (e Encoded) MarshalJSON() ([]byte, error) { return e, nil }

var nullID = json.RawMessage("null")

// decodeFrame splits one WebSocket message into items. If fatal is set the
// whole frame is answered by it alone (parse error, empty or oversize
// batch). batch reports whether the frame was an array, whose answers go
// back as one array.
func decodeFrame(frame []byte, maxBatch int) (items []item, batch bool, fatal *response) {
	return decodeFrameInto(nil, frame, maxBatch)
}

// decodeFrameInto is decodeFrame appending a single object's item to
// buf, which the caller can keep on its stack.
func decodeFrameInto(buf []item, frame []byte, maxBatch int) (items []item, batch bool, fatal *response) {
	frame = trimJSONSpace(frame)
	if len(frame) > 0 && frame[0] == '{' {
		it, err := decodeObject(frame)
		if err != nil {
			return nil, false, parseError(frame)
		}
		return append(buf, it), false, nil
	}
	if len(frame) == 0 || frame[0] != '[' {
		if len(frame) == 0 || !jsontext.Value(frame).IsValid(frameOpts) {
			return nil, false, parseError(frame)
		}
		return append(buf, notObject()), false, nil
	}
	var elems []jsontext.Value
	if err := jsonv2.Unmarshal(frame, &elems, frameOpts); err != nil {
		return nil, false, parseError(frame)
	}
	switch {
	case len(elems) == 0:
		return nil, false, errorResponse(nullID, Errorf(CodeInvalidRequest, "invalid request: empty batch"))
	case len(elems) > maxBatch:
		return nil, false, errorResponse(nullID, Errorf(CodeInvalidRequest, "invalid request: batch of %d exceeds the limit of %d", len(elems), maxBatch))
	}
	items = make([]item, len(elems))
	for i, e := range elems {
		if items[i], _ = decodeObject(e); len(e) == 0 || e[0] != '{' {
			items[i] = notObject()
		}
	}
	return items, true, nil
}

// parseError answers a frame that is not JSON.
func parseError(frame []byte) *response {
	if !utf8.Valid(frame) {
		return errorResponse(nullID, Errorf(CodeParseError, "parse error: invalid UTF-8"))
	}
	return errorResponse(nullID, Errorf(CodeParseError, "parse error: not a JSON value"))
}

func notObject() item {
	return item{bad: errorResponse(nullID, Errorf(CodeInvalidRequest, "invalid request: not a JSON object"))}
}

// decodeObject decodes one JSON object, raw, in one pass; err is set when
// raw is not valid JSON.
func decodeObject(raw []byte) (item, error) {
	f, err := objectEnvelope(raw)
	if err != nil {
		return notObject(), err
	}
	id, hasID := json.RawMessage(f.ID), len(f.ID) > 0
	if hasID && !validID(id) {
		return item{bad: errorResponse(nullID, Errorf(CodeInvalidRequest, `invalid request: "id" must be a string, a number or null`))}, nil
	}
	replyID := nullID
	if hasID {
		replyID = id
	}
	methodRaw, hasMethod := f.Method, len(f.Method) > 0
	result, hasResult := json.RawMessage(f.Result), len(f.Result) > 0
	errRaw, hasError := json.RawMessage(f.Error), len(f.Error) > 0
	if !hasMethod && (hasResult || hasError) {
		return decodeResponse(json.RawMessage(f.Version), id, result, hasResult, errRaw, hasError), nil
	}
	if len(f.Version) == 0 || !isVersion2(f.Version) {
		return item{bad: errorResponse(replyID, Errorf(CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`))}, nil
	}
	method, merr := jsonString(methodRaw)
	switch {
	case !hasMethod:
		return item{bad: errorResponse(replyID, Errorf(CodeInvalidRequest, `invalid request: "method" is required`))}, nil
	case merr != nil || method == "":
		return item{bad: errorResponse(replyID, Errorf(CodeInvalidRequest, `invalid request: "method" must be a non-empty string`))}, nil
	case hasResult || hasError:
		return item{bad: errorResponse(replyID, Errorf(CodeInvalidRequest, `invalid request: a request has no "result" or "error"`))}, nil
	}
	params := json.RawMessage(f.Params)
	if isNull(params) {
		params = nil // null is read as absent
	}
	if len(params) > 0 && params[0] != '{' && params[0] != '[' {
		return item{bad: errorResponse(replyID, Errorf(CodeInvalidRequest, `invalid request: "params" must be an object or an array`))}, nil
	}
	m := &message{kind: kindNotification, Method: method, Params: params}
	if hasID {
		m.kind, m.ID = kindRequest, id
	}
	return item{msg: m}, nil
}

// decodeResponse validates a response to a request we sent. One without
// an id is dropped (an item with neither msg nor bad). One with an id but
// otherwise invalid (no "jsonrpc":"2.0", both or neither of result and
// error, an error that is not an object with an integer code and a string
// message) answers its request as an invalid-request error, so that the
// caller waiting for it learns of the bad answer instead of waiting on.
func decodeResponse(version, id, result json.RawMessage, hasResult bool, errRaw json.RawMessage, hasError bool) item {
	if len(id) == 0 || isNull(id) {
		return item{}
	}
	m := &message{kind: kindResponse, ID: id}
	switch {
	case string(version) != `"2.0"`:
		m.Error = Errorf(CodeInvalidRequest, `invalid response: "jsonrpc" must be "2.0"`)
	case hasResult == hasError:
		m.Error = Errorf(CodeInvalidRequest, `invalid response: exactly one of "result" and "error" is required`)
	case hasResult:
		m.Result = result
	default:
		var e Error
		if errRaw[0] != '{' || json.Unmarshal(errRaw, &e) != nil {
			m.Error = Errorf(CodeInvalidRequest, `invalid response: "error" must be an object with an integer "code" and a string "message"`)
			break
		}
		m.Error = &e
	}
	return item{msg: m}
}

// isVersion2 reports whether raw, a member's value, is the JSON string
// "2.0". As written nearly always, it is compared in place: decoding it
// would allocate the string on every message.
func isVersion2(raw []byte) bool {
	if string(raw) == `"2.0"` {
		return true
	}
	version, err := jsonString(raw)
	return err == nil && version == "2.0"
}

func validID(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	switch c := id[0]; {
	case c == '"', c == '-', c >= '0' && c <= '9':
		return true
	default:
		return isNull(id)
	}
}

func isNull(raw json.RawMessage) bool { return string(raw) == "null" }

// trimJSONSpace trims the four whitespace characters JSON allows.
func trimJSONSpace(b []byte) []byte {
	return bytes.Trim(b, " \t\r\n")
}

func errorResponse(id json.RawMessage, e *Error) *response {
	return &response{JSONRPC: "2.0", ID: id, Error: e}
}

// resultResponse encodes result; a result that does not encode becomes an
// internal error.
func resultResponse(id json.RawMessage, result any) *response {
	b, err := marshal(result)
	if err != nil {
		return errorResponse(id, Errorf(CodeInternalError, "internal error: encode result: %v", err))
	}
	return &response{JSONRPC: "2.0", ID: id, Result: b}
}

// encodeResult is encodeResponse(resultResponse(id, result)), byte for
// byte, encoded in one pooled buffer behind the response's fixed head:
// one allocation of the exact size instead of three (the result's copy,
// the response and the message). A client answers every delivery with it.
func encodeResult(id json.RawMessage, result any) []byte {
	e := encoders.Get().(*encoder)
	defer e.put()
	e.buf.Reset()
	e.buf.WriteString(`{"jsonrpc":"2.0","id":`)
	if len(id) == 0 {
		e.buf.WriteString("null")
	} else {
		e.buf.Write(id)
	}
	e.buf.WriteString(`,"result":`)
	if err := e.enc.Encode(result); err != nil {
		return encodeResponse(errorResponse(id, Errorf(CodeInternalError, "internal error: encode result: %v", err)))
	}
	b := bytes.TrimSuffix(e.buf.Bytes(), []byte("\n"))
	out := make([]byte, len(b)+1)
	copy(out, b)
	out[len(b)] = '}'
	return out
}

// encodeResponse is r on the wire. A result (compact JSON, as
// resultResponse makes it) is framed in one pass, byte for byte what
// marshal would write; an error goes through marshal, and one that does
// not encode becomes an internal error.
func encodeResponse(r *response) []byte {
	if r.Error == nil && len(r.Result) > 0 && len(r.ID) > 0 && r.JSONRPC == "2.0" {
		b := make([]byte, 0, len(`{"jsonrpc":"2.0","id":,"result":}`)+len(r.ID)+len(r.Result))
		b = append(b, `{"jsonrpc":"2.0","id":`...)
		b = append(b, r.ID...)
		b = append(b, `,"result":`...)
		b = append(b, r.Result...)
		return append(b, '}')
	}
	b, err := marshal(r)
	if err != nil {
		b, _ = marshal(errorResponse(r.ID, Errorf(CodeInternalError, "internal error: encode response")))
	}
	return b
}

// encoder is an Encoder over its own buffer, kept in encoders between
// uses: every message encoded would otherwise allocate both and grow the
// buffer to its size.
type encoder struct {
	buf bytes.Buffer
	enc *json.Encoder
}

var encoders = sync.Pool{New: func() any {
	e := &encoder{}
	e.enc = json.NewEncoder(&e.buf)
	e.enc.SetEscapeHTML(false)
	return e
}}

// maxKeptEncoder bounds the buffer of an encoder put back for reuse.
const maxKeptEncoder = 64 << 10

// marshal encodes v without HTML escaping, so payloads pass through as
// their senders wrote them.
func marshal(v any) ([]byte, error) {
	e := encoders.Get().(*encoder)
	e.buf.Reset()
	err := e.enc.Encode(v)
	var out []byte
	if err == nil {
		out = bytes.Clone(bytes.TrimSuffix(e.buf.Bytes(), []byte("\n")))
	}
	e.put()
	return out, err
}

// put keeps e for reuse unless its buffer grew past maxKeptEncoder.
func (e *encoder) put() {
	if e.buf.Cap() <= maxKeptEncoder {
		encoders.Put(e)
	}
}

// encodeRequest is a request (a notification when id is empty) as
// marshal would encode an outRequest, built in one pass: params is
// already compact JSON, and the envelope around it is fixed.
func encodeRequest(id, method string, params json.RawMessage) ([]byte, error) {
	b := make([]byte, 0, len(`{"jsonrpc":"2.0","id":,"method":"","params":}`)+len(id)+len(method)+len(params))
	b = append(b, `{"jsonrpc":"2.0",`...)
	if id != "" {
		b = append(b, `"id":`...)
		b = append(b, id...)
		b = append(b, ',')
	}
	b = append(b, `"method":`...)
	if plainString(method) {
		b = append(b, '"')
		b = append(b, method...)
		b = append(b, '"')
	} else {
		m, err := marshal(method)
		if err != nil {
			return nil, err
		}
		b = append(b, m...)
	}
	if len(params) > 0 {
		b = append(b, `,"params":`...)
		b = append(b, params...)
	}
	return append(b, '}'), nil
}

// plainString reports whether s encodes as itself between quotes:
// printable ASCII without a quote or a backslash.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

// marshalParams encodes params for a request or notification: nil stays
// absent; anything else must encode to an object or an array.
func marshalParams(params any) (json.RawMessage, error) {
	if params == nil {
		return nil, nil
	}
	if e, ok := params.(Encoded); ok {
		return json.RawMessage(e), nil
	}
	b, err := marshal(params)
	if err != nil {
		return nil, err
	}
	if isNull(b) {
		return nil, nil
	}
	if b[0] != '{' && b[0] != '[' {
		return nil, fmt.Errorf("rpc: params must encode to a JSON object or array, not %.20s", b)
	}
	return b, nil
}

// decodeResult returns the error a response carries, or decodes its result
// into result (if non-nil).
func (m *message) decodeResult(method string, result any) error {
	if m.Error != nil {
		return m.Error
	}
	if raw, ok := result.(*json.RawMessage); ok && raw != nil {
		// What json.Unmarshal would store, without validating again what
		// the frame's decoding has validated, and without copying: every
		// frame is a copy of its own (wsconn.Reader) that nothing else
		// writes, and the envelope caps each member at its end, so an
		// append never runs into the bytes after it.
		*raw = m.Result
		return nil
	}
	if u, ok := result.(json.Unmarshaler); ok && m.Result != nil && nonNilPointer(result) {
		// What json.Unmarshal would do once it had validated m.Result
		// again (the frame's decoding has): hand it to the decoder the
		// result has, in its exact bytes, and return its error as it is.
		if err := u.UnmarshalJSON(m.Result); err != nil {
			return fmt.Errorf("rpc: decode result of %s: %w", method, err)
		}
		return nil
	}
	if result != nil {
		// encoding/json's rules on the v2 engine: one pass where
		// json.Unmarshal validates first, and a quarter of its
		// allocations for a bus's SendResult.
		if err := jsonv1.Unmarshal(m.Result, result); err != nil {
			return fmt.Errorf("rpc: decode result of %s: %w", method, err)
		}
	}
	return nil
}

// nonNilPointer reports whether v is a pointer that is not nil: what
// json.Unmarshal requires of its target, and refuses otherwise with an
// *json.InvalidUnmarshalError.
func nonNilPointer(v any) bool {
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && !rv.IsNil()
}
