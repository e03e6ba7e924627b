package relay

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// Mesh is the part of a running node the relay and the local API need.
// *node.Node satisfies it; the compile-time check lives in cli, so that
// node never imports relay. Implementations must be safe for concurrent use.
type Mesh interface {
	AgentID() string
	Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error)
	Peers() []protocol.PeerInfo
}

// MaxCallTimeout caps the timeout a client may ask for in mesh.call.
const MaxCallTimeout = time.Hour

// CallParams are the params of mesh.call.
type CallParams struct {
	AgentID    string          `json:"agentId"`
	Capability string          `json:"capability,omitempty"`
	Action     string          `json:"action,omitempty"` // alias of capability
	Params     json.RawMessage `json:"params,omitempty"`
	TimeoutMS  int64           `json:"timeoutMs,omitempty"`
}

// ProgressParams are the params of a mesh.progress notification.
type ProgressParams struct {
	RequestID json.RawMessage    `json:"requestId"`
	Response  *protocol.Response `json:"response"`
}

// requestIDKey carries the JSON-RPC id of the running call in its context,
// so mesh.call can tag its progress notifications.
type requestIDKey struct{}

func (s *Server) registerMeshMethods() {
	s.Handle("ping", func(context.Context, *Conn, json.RawMessage) (any, error) {
		return map[string]string{"timestamp": time.Now().UTC().Format(time.RFC3339)}, nil
	})
	s.Handle("mesh.id", func(context.Context, *Conn, json.RawMessage) (any, error) {
		return map[string]string{"agentId": s.mesh.AgentID()}, nil
	})
	s.Handle("mesh.peers", func(context.Context, *Conn, json.RawMessage) (any, error) {
		peers := s.mesh.Peers()
		if peers == nil {
			peers = []protocol.PeerInfo{}
		}
		return peers, nil
	})
	s.Handle("mesh.call", s.meshCall)
}

func decodeParams(raw json.RawMessage, v any) error {
	if len(raw) == 0 {
		return Errorf(CodeInvalidParams, "invalid params: an object is required")
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return Errorf(CodeInvalidParams, "invalid params: %v", err)
	}
	return nil
}

func (s *Server) meshCall(ctx context.Context, c *Conn, raw json.RawMessage) (any, error) {
	var p CallParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	action := p.Capability
	if action == "" {
		action = p.Action
	} else if p.Action != "" && p.Action != p.Capability {
		return nil, Errorf(CodeInvalidParams, "invalid params: capability and action differ")
	}
	switch {
	case strings.TrimSpace(p.AgentID) == "":
		return nil, Errorf(CodeInvalidParams, `invalid params: "agentId" is required`)
	case action == "":
		return nil, Errorf(CodeInvalidParams, `invalid params: "capability" is required`)
	case p.TimeoutMS < 0 || time.Duration(p.TimeoutMS)*time.Millisecond > MaxCallTimeout:
		return nil, Errorf(CodeInvalidParams, `invalid params: "timeoutMs" must be between 0 and %d`, MaxCallTimeout.Milliseconds())
	case len(p.Params) > 0 && p.Params[0] != '{' && string(p.Params) != "null":
		return nil, Errorf(CodeInvalidParams, `invalid params: "params" must be an object`)
	}
	reqID, _ := ctx.Value(requestIDKey{}).(json.RawMessage)
	resp, err := s.mesh.Call(ctx, protocol.CallRequest{
		To:      p.AgentID,
		Action:  action,
		Params:  p.Params,
		Timeout: time.Duration(p.TimeoutMS) * time.Millisecond,
		Progress: func(r *protocol.Response) {
			if reqID != nil {
				_ = c.Notify("mesh.progress", ProgressParams{RequestID: reqID, Response: r})
			}
		},
	})
	if err != nil {
		var pe *protocol.Error
		if !errors.As(err, &pe) {
			pe = protocol.AsError(err)
		}
		return nil, pe
	}
	return resp, nil
}
