package rpc

import (
	"context"

	"github.com/meshagent/meshagent/protocol"
)

// StatusSetter is implemented by a Mesh whose agent declares a status in
// its heartbeats (*node.Node is one). A server whose mesh is not one
// answers mesh.setStatus with -32601.
type StatusSetter interface {
	SetStatus(s protocol.AgentStatus) error
	DeclaredStatus() protocol.AgentStatus
}

// MethodMeshSetStatus declares the agent's status (seed 004's registry):
//
//	mesh.setStatus {"status":"available"|"busy","currentBead"?,"maxConcurrentBeads"?}
//	               → {"status","currentBead"?,"maxConcurrentBeads"?}
//
// The whole status is replaced (a member left out is cleared); the answer
// is the status now declared. Peers see it in the next heartbeat, sent at
// once; GET /api/v1/agents shows it as current_bead and
// max_concurrent_beads.
const MethodMeshSetStatus = "mesh.setStatus"

func (s *Server) registerStatusMethods() {
	s.Handle(MethodMeshSetStatus, s.meshSetStatus)
}

func (s *Server) meshSetStatus(_ context.Context, r *Request) (any, error) {
	ss, ok := s.mesh.(StatusSetter)
	if !ok {
		return nil, Errorf(CodeMethodNotFound, "method not found: %s (this node declares no status)", r.Method)
	}
	var st protocol.AgentStatus
	if err := objectParams(r, &st, `{"status":"available"|"busy","currentBead"?,"maxConcurrentBeads"?}`); err != nil {
		return nil, err
	}
	if err := ss.SetStatus(st); err != nil {
		return nil, Errorf(CodeInvalidParams, "invalid params: %s: %s", r.Method, protocol.AsError(err).Message)
	}
	return ss.DeclaredStatus(), nil
}

// SetStatus runs mesh.setStatus and returns the status declared.
func (c *Client) SetStatus(ctx context.Context, st protocol.AgentStatus) (protocol.AgentStatus, error) {
	var out protocol.AgentStatus
	err := c.Call(ctx, MethodMeshSetStatus, st, &out)
	return out, err
}
