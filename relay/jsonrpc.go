package relay

import (
	"bytes"
	"encoding/json"
)

// request is one decoded JSON-RPC request or notification.
type request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// notification reports whether the request expects no response.
func (r *request) notification() bool { return r.ID == nil }

// response is one JSON-RPC response.
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// notificationMsg is a server-to-client notification.
type notificationMsg struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

var nullID = json.RawMessage("null")

// decodeMessage splits one WebSocket message into requests. batch reports
// whether it was an array. A nil slice with a non-nil error response means
// the whole message is answered by that error (parse error, empty batch).
// Elements that are invalid requests come back as entries with bad set.
func decodeMessage(msg []byte, maxBatch int) (reqs []decoded, batch bool, fatal *response) {
	msg = bytes.TrimSpace(msg)
	if len(msg) == 0 || !json.Valid(msg) {
		return nil, false, errorResponse(nullID, Errorf(CodeParseError, "parse error: not valid JSON"))
	}
	if msg[0] == '[' {
		var elems []json.RawMessage
		if err := json.Unmarshal(msg, &elems); err != nil {
			return nil, false, errorResponse(nullID, Errorf(CodeParseError, "parse error: %v", err))
		}
		if len(elems) == 0 {
			return nil, false, errorResponse(nullID, Errorf(CodeInvalidRequest, "invalid request: empty batch"))
		}
		if len(elems) > maxBatch {
			return nil, false, errorResponse(nullID, Errorf(CodeInvalidRequest, "invalid request: batch of %d exceeds the limit of %d", len(elems), maxBatch))
		}
		reqs = make([]decoded, len(elems))
		for i, e := range elems {
			reqs[i] = decodeRequest(e)
		}
		return reqs, true, nil
	}
	return []decoded{decodeRequest(msg)}, false, nil
}

// decoded is a request or, if bad is set, the error response it earns.
type decoded struct {
	req request
	bad *response
}

func decodeRequest(raw json.RawMessage) decoded {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		return decoded{bad: errorResponse(nullID, Errorf(CodeInvalidRequest, "invalid request: not a JSON object"))}
	}
	id, hasID := probe["id"]
	if hasID && !validID(id) {
		return decoded{bad: errorResponse(nullID, Errorf(CodeInvalidRequest, "invalid request: id must be a string, a number or null"))}
	}
	respID := nullID
	if hasID {
		respID = id
	}
	var r request
	if err := json.Unmarshal(raw, &r); err != nil {
		return decoded{bad: errorResponse(respID, Errorf(CodeInvalidRequest, "invalid request: %v", err))}
	}
	if hasID {
		r.ID = id // keep an explicit null, which is not a notification
	}
	switch {
	case r.JSONRPC != "2.0":
		return decoded{bad: errorResponse(respID, Errorf(CodeInvalidRequest, `invalid request: "jsonrpc" must be "2.0"`))}
	case r.Method == "":
		return decoded{bad: errorResponse(respID, Errorf(CodeInvalidRequest, `invalid request: "method" must be a non-empty string`))}
	case len(r.Params) > 0 && r.Params[0] != '{' && r.Params[0] != '[':
		return decoded{bad: errorResponse(respID, Errorf(CodeInvalidRequest, `invalid request: "params" must be an object or an array`))}
	}
	return decoded{req: r}
}

func validID(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	switch id[0] {
	case '"', 'n':
		return true
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	}
	return false
}

func errorResponse(id json.RawMessage, e *Error) *response {
	return &response{JSONRPC: "2.0", ID: id, Error: e}
}

func resultResponse(id json.RawMessage, result any) *response {
	b, err := json.Marshal(result)
	if err != nil {
		return errorResponse(id, Errorf(CodeInternalError, "internal error: result: %v", err))
	}
	return &response{JSONRPC: "2.0", ID: id, Result: b}
}
