package a2a

import (
	"encoding/json"
	"fmt"

	"github.com/meshagent/meshagent/protocol"
)

// maxRequestBytes bounds the body of one JSON-RPC request.
const maxRequestBytes = 1 << 20

// Request is one JSON-RPC 2.0 request of the A2A binding.
type Request struct {
	JSONRPC string          `json:"jsonrpc"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
	ID      json.RawMessage `json:"id,omitempty"`
}

// Error is a JSON-RPC error object; it is also the Go error the gateway's
// methods return, so that the code reaches the client.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string { return fmt.Sprintf("a2a: %d: %s", e.Code, e.Message) }

// Errorf returns an *Error with code and a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// response is a JSON-RPC 2.0 response.
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// DecodeRequest reads one JSON-RPC 2.0 request strictly: an object with
// "jsonrpc": "2.0", a non-empty string "method", "params" an object if
// present, and an "id" that is a string or a number (A2A has no
// notifications). A request that is not JSON is CodeParseError; one of the
// wrong shape is CodeInvalidRequest. The id is returned whenever it could
// be read, so that the error answers the right request.
func DecodeRequest(body []byte) (*Request, *Error) {
	if !json.Valid(body) {
		return nil, Errorf(CodeParseError, "parse error: the body is not one JSON value")
	}
	var r Request
	if err := protocol.DecodeStrict(body, &r); err != nil {
		// r may be half filled: answer with the id alone, if it is one.
		var id struct {
			ID json.RawMessage `json:"id"`
		}
		out := &Request{}
		if protocol.DecodeStrict(body, &id, protocol.AllowUnknown()) == nil && validID(id.ID) {
			out.ID = id.ID
		}
		return out, Errorf(CodeInvalidRequest, "invalid request: %v", err)
	}
	switch {
	case !validID(r.ID):
		r.ID = nil
		return &r, Errorf(CodeInvalidRequest, `invalid request: "id" must be a string or a number`)
	case r.JSONRPC != "2.0":
		return &r, Errorf(CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`)
	case r.Method == "":
		return &r, Errorf(CodeInvalidRequest, `invalid request: "method" is required`)
	case len(r.Params) > 0 && r.Params[0] != '{' && string(r.Params) != "null":
		return &r, Errorf(CodeInvalidParams, `invalid params: "params" must be an object`)
	}
	return &r, nil
}

// validID reports whether id is a JSON string or number.
func validID(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	c := id[0]
	return c == '"' || c == '-' || (c >= '0' && c <= '9')
}

// decodeParams decodes a method's params strictly into v: unknown or
// repeated members and wrong types are CodeInvalidParams.
func decodeParams(method string, raw json.RawMessage, v any) *Error {
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage("{}")
	}
	if err := protocol.DecodeStrict(raw, v); err != nil {
		return Errorf(CodeInvalidParams, "invalid params: %s: %v", method, err)
	}
	return nil
}
