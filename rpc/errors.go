package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/meshagent/meshagent/protocol"
)

// JSON-RPC error codes: the one table. Nothing else in the package invents
// a code.
//
//	code    constant                        meaning
//	-32700  CodeParseError                  the frame is not JSON (or not UTF-8); id null
//	-32600  CodeInvalidRequest              not a JSON-RPC 2.0 request; an empty or oversize batch
//	-32601  CodeMethodNotFound              no such method
//	-32602  CodeInvalidParams               params missing, of the wrong type, or out of range
//	-32603  CodeInternalError               the server failed (a handler panicked, a result did not encode)
//	-32001  CodeAlreadyInitialized          seed 001: initialize sent twice; or its clientId is held by another live connection (data {"reason":"clientIdInUse"})
//	-32002  CodeInvalidClientInfo           seed 001: bad clientInfo in initialize
//	-32003  CodeAlreadySubscribed           seed 001: subscribe to a pattern twice
//	-32004  CodeSubscriptionNotFound        seed 001: unsubscribe from an unknown pattern
//	-32005  CodeServerBusy                  Limits.MaxConcurrentCalls requests already running on this connection; or a send the node's store cannot write (a full disk: sendMessage, mesh.sendMessage), nothing accepted
//	-32006  CodeNotInitialized              a bus method before initialize (seed 001 names no code)
//	-32007  CodeNoPeers                     mesh.publish: no agent subscribes to the topic (nothing was sent)
//	-32021  CodeEscalated                   a serving client's answer to mesh.handle: it escalated the task (the message is the reason) and leaves the answer to its operator's decision
//	-32020  CodeForbidden                   a public listener does not serve the method, topic or pattern to this client (anonymous, or its credential does not grant it)
//	-32010  CodeMeshInvalidMessage          AgentProtocol INVALID_MESSAGE
//	-32011  CodeMeshInvalidSignature        AgentProtocol INVALID_SIGNATURE
//	-32012  CodeMeshUnknownAgent            AgentProtocol UNKNOWN_AGENT
//	-32013  CodeMeshCapabilityNotSupported  AgentProtocol CAPABILITY_NOT_SUPPORTED
//	-32014  CodeMeshTimeout                 AgentProtocol TIMEOUT
//	-32015  CodeMeshRateLimited             AgentProtocol RATE_LIMITED
//	-32016  CodeMeshInternalError           AgentProtocol INTERNAL_ERROR
//	-32017  CodeMeshUnauthorized            AgentProtocol UNAUTHORIZED
//
// The -32010…-32017 errors carry data {"code": "<AgentProtocol code>",
// "details": …, "correlationId": …} (details and correlationId when known);
// data.code is authoritative and is what clients branch on.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603

	CodeAlreadyInitialized   = -32001
	CodeInvalidClientInfo    = -32002
	CodeAlreadySubscribed    = -32003
	CodeSubscriptionNotFound = -32004

	CodeServerBusy     = -32005
	CodeNotInitialized = -32006
	CodeNoPeers        = -32007

	CodeForbidden = -32020
	CodeEscalated = -32021

	CodeMeshInvalidMessage         = -32010
	CodeMeshInvalidSignature       = -32011
	CodeMeshUnknownAgent           = -32012
	CodeMeshCapabilityNotSupported = -32013
	CodeMeshTimeout                = -32014
	CodeMeshRateLimited            = -32015
	CodeMeshInternalError          = -32016
	CodeMeshUnauthorized           = -32017
)

// meshCodes maps each AgentProtocol code to its JSON-RPC code.
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

// MeshErrorCode returns the JSON-RPC code for an AgentProtocol code;
// CodeMeshInternalError for an unknown one.
func MeshErrorCode(c protocol.Code) int {
	if code, ok := meshCodes[c]; ok {
		return code
	}
	return CodeMeshInternalError
}

// Error is a JSON-RPC 2.0 error object. A method returns one to choose
// the code; Client.Call returns one when the server answers with an error,
// so callers branch with errors.As.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

var _ error = (*Error)(nil)

// Error implements error.
func (e *Error) Error() string {
	return fmt.Sprintf("rpc: json-rpc error %d: %s", e.Code, e.Message)
}

// Errorf returns an *Error with a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// meshErrorData is the data of a JSON-RPC error carrying an AgentProtocol
// error.
type meshErrorData struct {
	Code          protocol.Code   `json:"code"`
	Details       json.RawMessage `json:"details,omitempty"`
	CorrelationID string          `json:"correlationId,omitempty"`
}

// FromProtocolError converts an AgentProtocol error into its JSON-RPC
// error (see the code table).
func FromProtocolError(pe *protocol.Error) *Error {
	data, err := json.Marshal(meshErrorData{Code: pe.Code, Details: pe.Details, CorrelationID: pe.CorrelationID})
	if err != nil { // details that are not JSON: keep the error, drop them
		data, _ = json.Marshal(meshErrorData{Code: pe.Code, CorrelationID: pe.CorrelationID})
	}
	msg := pe.Message
	if msg == "" {
		msg = string(pe.Code)
	}
	return &Error{Code: MeshErrorCode(pe.Code), Message: msg, Data: data}
}

// ProtocolError returns the AgentProtocol error an *Error in err's chain
// carries (data.code is a known AgentProtocol code), or nil.
func ProtocolError(err error) *protocol.Error {
	var re *Error
	if !errors.As(err, &re) || len(re.Data) == 0 {
		return nil
	}
	var d meshErrorData
	if json.Unmarshal(re.Data, &d) != nil || !d.Code.Valid() {
		return nil
	}
	return &protocol.Error{Code: d.Code, Message: re.Message, Details: d.Details, CorrelationID: d.CorrelationID}
}

// toRPCError maps an error a method returned to the error object sent.
func toRPCError(err error) *Error {
	var re *Error
	if errors.As(err, &re) {
		return re
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return FromProtocolError(pe)
	}
	if errors.Is(err, context.Canceled) {
		return Errorf(CodeInternalError, "request cancelled")
	}
	return Errorf(CodeInternalError, "internal error: %v", err)
}

var (
	// ErrNoServer is returned (wrapped) by Dial when nothing listens at the
	// address: the connection was refused.
	ErrNoServer = errors.New("rpc: no server listening")
	// ErrUnauthorized is returned (wrapped) by Dial when the server
	// refused the connection for its credential (HTTP 401): no token, or
	// one the server does not hold.
	ErrUnauthorized = errors.New("rpc: the server refused the credential")
	// ErrClosed is returned (wrapped, with the cause) by Client and Conn
	// methods once the connection has closed.
	ErrClosed = errors.New("rpc: connection closed")
	// ErrSlowConsumer is returned by Conn.Notify and Conn.Call when the
	// client's send queue is full; the client has been disconnected.
	ErrSlowConsumer = errors.New("rpc: slow consumer disconnected")
	// ErrServerClosed is returned by Serve, Start and ListenAndServe after
	// Close.
	ErrServerClosed = errors.New("rpc: server closed")
	// ErrInvalidAddr is wrapped by Control.Connect when the address does
	// not parse; mesh.connect then answers CodeInvalidParams.
	ErrInvalidAddr = errors.New("rpc: invalid peer address")
	// ErrBadToken is returned (wrapped) by Tokens.Authenticate for a
	// missing or unknown token. The HTTP answer is 401.
	ErrBadToken = errors.New("rpc: missing or unknown token")
)

// MeshParamsError is an error of the mesh as the local API answers it: a
// refusal of what the client asked for (INVALID_MESSAGE: a bad pattern, a
// durable name in use or past the node's bound) is -32602, anything else
// its mapped code.
func MeshParamsError(err error) error {
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.Code == protocol.CodeInvalidMessage {
		return Errorf(CodeInvalidParams, "invalid params: %s", pe.Message)
	}
	return protocol.AsError(err)
}
