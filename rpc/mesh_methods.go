package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Mesh is the part of a running node the relay and local API need.
// *node.Node satisfies it; the compile-time check lives outside this
// package, so that relay never imports node. Implementations must be safe
// for concurrent use, and Call must return when ctx ends.
type Mesh interface {
	AgentID() string
	Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error)
	Peers() []protocol.PeerInfo
}

// BusClientPrefix starts the name by which the relay vouches for a bus
// client authenticated by a credential when mesh.call calls a mesh agent
// for it (protocol.MetaOnBehalfOf): credential "ci" is "bus:ci", which a
// provider authorizes as "<relay id>/bus:ci". The local API's clients
// are the node itself and are not vouched for.
const BusClientPrefix = "bus:"

// Method names served by every server, and the notification mesh.call
// sends while it runs.
const (
	MethodPing         = "ping"
	MethodMeshID       = "mesh.id"
	MethodMeshPeers    = "mesh.peers"
	MethodMeshCall     = "mesh.call"
	MethodMeshProgress = "mesh.progress"
)

// MaxCallTimeout caps the timeout a client may ask for in mesh.call.
const MaxCallTimeout = time.Hour

// CallParams are the params of mesh.call. On the wire "action" is
// accepted as an alias of "capability" (seed 000 and 002 say action); if
// both are given they must agree.
type CallParams struct {
	// AgentID is the target agent, a peer ID or a base64 Ed25519 public
	// key. Left out, the node chooses a provider of the capability (on a
	// server built WithAnyCaller; elsewhere it is required).
	AgentID string `json:"agentId,omitempty"`
	// Capability names the capability to invoke.
	Capability string `json:"capability"`
	// Action is accepted as an alias of Capability; clients leave it
	// empty.
	Action string `json:"action,omitempty"`
	// Params is the JSON object handed to the capability. Optional.
	Params json.RawMessage `json:"params,omitempty"`
	// TimeoutMS bounds the call in milliseconds; 0 means the node's
	// default. At most MaxCallTimeout.
	TimeoutMS int64 `json:"timeoutMs,omitempty"`
	// TaskID names the request (its correlation id), so that the caller
	// can ask for its status or cancel it (mesh.taskStatus,
	// mesh.taskCancel). Optional: a fresh one otherwise.
	TaskID string `json:"taskId,omitempty"`
	// Receipt asks for the provider's signed final response envelope,
	// returned as the result's "receipt" (CallResult.Receipt).
	Receipt bool `json:"receipt,omitempty"`
}

// ProgressParams are the params of a mesh.progress notification: one
// in_progress response of the mesh.call whose JSON-RPC id is RequestID.
// All of a call's progress notifications precede its final response.
type ProgressParams struct {
	RequestID json.RawMessage    `json:"requestId"`
	Response  *protocol.Response `json:"response"`
}

// IDResult is the result of mesh.id.
type IDResult struct {
	AgentID string `json:"agentId"`
	// PublicKey is the agent's Ed25519 public key, base64 (the other form
	// of an agent id AgentProtocol accepts).
	PublicKey string `json:"publicKey,omitempty"`
	// Addrs are the node's listen multiaddrs, each ending in
	// /p2p/<agent id>, on a server with a Control (a node's local API);
	// absent elsewhere.
	Addrs []string `json:"addrs,omitempty"`
}

// PingResult is the result of ping, as seed 001 specifies it.
type PingResult struct {
	// Timestamp is the server's time, RFC 3339 in UTC.
	Timestamp string `json:"timestamp"`
}

func (s *Server) registerMeshMethods() {
	s.Handle(MethodPing, s.ping)
	s.Handle(MethodMeshID, s.meshID)
	s.Handle(MethodMeshPeers, s.meshPeers)
	s.Handle(MethodMeshCall, s.meshCall)
	s.Handle(MethodMeshPublish, s.meshPublish)
	s.Handle(MethodMeshSubscribe, s.meshSubscribe)
	s.Handle(MethodMeshUnsubscribe, s.meshUnsubscribe)
	s.registerControlMethods()
	s.registerServeMethods()
}

func (s *Server) ping(_ context.Context, req *Request) (any, error) {
	if err := NoParams(req); err != nil {
		return nil, err
	}
	return PingResult{Timestamp: s.Now().UTC().Format(time.RFC3339)}, nil
}

func (s *Server) meshID(_ context.Context, req *Request) (any, error) {
	if err := NoParams(req); err != nil {
		return nil, err
	}
	res := IDResult{AgentID: s.mesh.AgentID()}
	res.PublicKey = publicKeyOf(res.AgentID)
	if s.cfg.Control != nil {
		res.Addrs = orEmpty(s.cfg.Control.Addrs())
	}
	return res, nil
}

func (s *Server) meshPeers(_ context.Context, req *Request) (any, error) {
	if err := NoParams(req); err != nil {
		return nil, err
	}
	peers := s.mesh.Peers()
	if peers == nil {
		peers = []protocol.PeerInfo{}
	}
	return peers, nil
}

// callShape words mesh.call's params errors.
var callShape = paramShape{
	method: MethodMeshCall,
	object: `mesh.call takes an object {"agentId", "capability", "params", "timeoutMs"}`,
	takes:  "agentId, capability, params, timeoutMs",
	member: func(fe *protocol.FieldError) error {
		if under(fe, "receipt") {
			return Errorf(CodeInvalidParams, `invalid params: "receipt" must be true or false`)
		}
		return timeoutMember(callTimeoutError)(fe)
	},
}

func callTimeoutError() error {
	return Errorf(CodeInvalidParams, `invalid params: "timeoutMs" must be a whole number of milliseconds from 0 to %d`, MaxCallTimeout.Milliseconds())
}

// parseCallParams validates mesh.call's params and returns the request
// for the mesh, without Progress or Signed, and whether a receipt is
// asked for. With anyOK, "agentId" may be left out (the request's To is
// then empty).
func parseCallParams(raw json.RawMessage, anyOK bool) (protocol.CallRequest, bool, error) {
	var req protocol.CallRequest
	var p CallParams
	if err := callShape.decode(raw, &p); err != nil {
		return req, false, err
	}
	switch {
	case p.AgentID != "":
		id, err := sign.ParseAgentID(p.AgentID)
		if err != nil {
			return req, false, Errorf(CodeInvalidParams, `invalid params: "agentId": %v`, err)
		}
		req.To = id.String()
	case !anyOK:
		return req, false, Errorf(CodeInvalidParams, `invalid params: "agentId" is required`)
	case agentIDGiven(raw):
		return req, false, Errorf(CodeInvalidParams, `invalid params: "agentId" is empty; leave it out to let the node choose the provider`)
	}

	capability := p.Capability
	switch {
	case capability == "" && p.Action == "":
		return req, false, Errorf(CodeInvalidParams, `invalid params: "capability" is required`)
	case capability == "":
		capability = p.Action
	case p.Action != "" && p.Action != capability:
		return req, false, Errorf(CodeInvalidParams, `invalid params: "capability" and its alias "action" differ`)
	}
	if err := (&protocol.Capability{Name: capability}).Validate(); err != nil {
		var pe *protocol.Error
		if errors.As(err, &pe) {
			return req, false, Errorf(CodeInvalidParams, `invalid params: "capability": %s`, pe.Message)
		}
		return req, false, Errorf(CodeInvalidParams, `invalid params: "capability": %v`, err)
	}
	req.Action = capability

	if len(p.Params) > 0 && !isNull(p.Params) {
		if p.Params[0] != '{' {
			return req, false, Errorf(CodeInvalidParams, `invalid params: "params" must be an object`)
		}
		req.Params = p.Params
	}

	if len(p.TaskID) > 128 {
		return req, false, Errorf(CodeInvalidParams, `invalid params: "taskId" is longer than 128 bytes`)
	}
	req.CorrelationID = p.TaskID

	if p.TimeoutMS < 0 || p.TimeoutMS > MaxCallTimeout.Milliseconds() {
		return req, false, callTimeoutError()
	}
	req.Timeout = time.Duration(p.TimeoutMS) * time.Millisecond
	return req, p.Receipt, nil
}

// meshCall serves mesh.call: each in_progress response goes to the caller
// as a mesh.progress notification, queued before the final response; an
// AgentProtocol failure becomes the JSON-RPC error of its code (see
// errors.go) with data.code.
func (s *Server) meshCall(ctx context.Context, r *Request) (any, error) {
	req, wantReceipt, err := parseCallParams(r.Params, s.cfg.AnyCaller != nil)
	if err != nil {
		return nil, err
	}
	var receipt json.RawMessage
	if wantReceipt {
		// Called on this goroutine before Call returns (CallRequest.Signed).
		req.Signed = func(s json.RawMessage) { receipt = s }
	}
	if !r.IsNotification() {
		// Progress is called on the node's reader goroutine; Notify never
		// blocks. Progress that comes after Call returned is dropped, so
		// that nothing follows the final response.
		var mu sync.Mutex
		done := false
		req.Progress = func(p *protocol.Response) {
			mu.Lock()
			defer mu.Unlock()
			if done || p == nil {
				return
			}
			_ = r.Conn.Notify(MethodMeshProgress, ProgressParams{RequestID: r.ID, Response: p})
		}
		defer func() {
			mu.Lock()
			done = true
			mu.Unlock()
		}()
	}
	if cred := r.Conn.Credential(); cred != nil {
		// The relay calls for its authenticated client and vouches for
		// it, so the provider sees "<relay id>/bus:<name>", not the relay.
		req.OnBehalfOf = BusClientPrefix + cred.Name
	}
	var resp *protocol.Response
	var agent string
	if req.To == "" {
		resp, agent, err = s.cfg.AnyCaller.CallAny(ctx, req)
	} else {
		resp, err = s.mesh.Call(ctx, req)
	}
	if err != nil {
		return nil, protocol.AsError(err)
	}
	if resp == nil {
		return nil, fmt.Errorf("mesh returned no response")
	}
	if req.To != "" && !wantReceipt {
		return resp, nil // the plain response, as mesh.call always answered
	}
	return CallResult{Response: *resp, AgentID: agent, Receipt: receipt}, nil
}

// agentIDGiven reports whether mesh.call's params (already decoded
// strictly) hold a non-null "agentId": an empty one is a mistake, not a
// request to choose the provider.
func agentIDGiven(raw json.RawMessage) bool {
	var w struct {
		AgentID *string `json:"agentId"`
	}
	return protocol.DecodeStrict(raw, &w, protocol.AllowUnknown()) == nil && w.AgentID != nil
}
