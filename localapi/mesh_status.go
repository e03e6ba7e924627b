package localapi

import (
	"context"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// setStatus serves mesh.setStatus (rpc.MethodMeshSetStatus): the whole
// status is replaced and the answer is the status now declared; a status
// the node refuses is -32602 and changes nothing.
func (m methods) setStatus(_ context.Context, r *rpc.Request) (any, error) {
	var st protocol.AgentStatus
	if err := rpc.ObjectParams(r, &st, `{"status":"available"|"busy","currentBead"?,"maxConcurrentBeads"?}`); err != nil {
		return nil, err
	}
	if err := m.n.SetStatus(st); err != nil {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: %s: %s", r.Method, protocol.AsError(err).Message)
	}
	return m.n.DeclaredStatus(), nil
}
