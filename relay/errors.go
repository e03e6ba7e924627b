package relay

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/meshagent/meshagent/protocol"
)

// JSON-RPC error codes. The first five are JSON-RPC 2.0's; -32001…-32004
// are seed 001's bus codes; the rest are meshagent's own.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603

	CodeAlreadyInitialized   = -32001 // seed 001
	CodeInvalidClientInfo    = -32002 // seed 001
	CodeAlreadySubscribed    = -32003 // seed 001
	CodeSubscriptionNotFound = -32004 // seed 001

	CodeServerBusy      = -32005 // too many concurrent calls on this connection
	CodeMessageTooLarge = -32006 // frame above the read limit (then disconnected)
	CodeNotInitialized  = -32007 // bus method before initialize

	// AgentProtocol errors from the mesh, one code each; data.code names
	// the AgentProtocol code.
	CodeMeshInvalidMessage         = -32010
	CodeMeshInvalidSignature       = -32011
	CodeMeshUnknownAgent           = -32012
	CodeMeshCapabilityNotSupported = -32013
	CodeMeshTimeout                = -32014
	CodeMeshRateLimited            = -32015
	CodeMeshInternalError          = -32016
	CodeMeshUnauthorized           = -32017
)

var meshCodes = map[protocol.Code]int{
	protocol.CodeInvalidMessage:         CodeMeshInvalidMessage,
	protocol.CodeInvalidSignature:       CodeMeshInvalidSignature,
	protocol.CodeUnknownAgent:           CodeMeshUnknownAgent,
	protocol.CodeCapabilityNotSupported: CodeMeshCapabilityNotSupported,
	protocol.CodeTimeout:                CodeMeshTimeout,
	protocol.CodeRateLimited:            CodeMeshRateLimited,
	protocol.CodeInternalError:          CodeMeshInternalError,
	protocol.CodeUnauthorized:           CodeMeshUnauthorized,
}

// Error is a JSON-RPC error object. Methods return it to choose the code;
// any other error becomes -32603.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

var _ error = (*Error)(nil)

func (e *Error) Error() string { return fmt.Sprintf("json-rpc error %d: %s", e.Code, e.Message) }

// Errorf returns an *Error with a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// meshError is the data of a JSON-RPC error that carries an AgentProtocol
// error.
type meshError struct {
	Code    protocol.Code   `json:"code"`
	Details json.RawMessage `json:"details,omitempty"`
}

// toRPCError maps any error a method returned to a JSON-RPC error.
func toRPCError(err error) *Error {
	var re *Error
	if errors.As(err, &re) {
		return re
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		data, _ := json.Marshal(meshError{Code: pe.Code, Details: pe.Details})
		code, ok := meshCodes[pe.Code]
		if !ok {
			code = CodeMeshInternalError
		}
		return &Error{Code: code, Message: pe.Message, Data: data}
	}
	return &Error{Code: CodeInternalError, Message: err.Error()}
}

// AsProtocolError converts a JSON-RPC error carrying an AgentProtocol
// error back into a *protocol.Error. It returns nil if err carries none.
func AsProtocolError(err error) *protocol.Error {
	var re *Error
	if !errors.As(err, &re) || len(re.Data) == 0 {
		return nil
	}
	var me meshError
	if json.Unmarshal(re.Data, &me) != nil || !me.Code.Valid() {
		return nil
	}
	return &protocol.Error{Code: me.Code, Message: re.Message, Details: me.Details}
}

// ErrNoServer is returned by Dial when nothing listens at the address.
var ErrNoServer = errors.New("relay: no server listening")

// ErrClosed is returned by a closed server or client.
var ErrClosed = errors.New("relay: closed")
