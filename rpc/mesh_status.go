package rpc

import (
	"context"

	"github.com/meshagent/meshagent/protocol"
)

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

// SetStatus runs mesh.setStatus and returns the status declared.
func (c *Client) SetStatus(ctx context.Context, st protocol.AgentStatus) (protocol.AgentStatus, error) {
	var out protocol.AgentStatus
	err := c.Call(ctx, MethodMeshSetStatus, st, &out)
	return out, err
}
