package rpc

import (
	"context"

	"github.com/meshagent/meshagent/protocol"
)

// MethodMeshCapabilities lists the capability objects the node serves
// itself (its capabilities file, its built-ins and what clients offer with
// mesh.serve), in full: schemas, descriptions and keywords. mesh.status
// names them only; the MCP server needs their schemas. Like mesh.status it
// is one of the operator's methods (WithControl), served when the Mesh is
// a CapabilityLister.
const MethodMeshCapabilities = "mesh.capabilities"

func (s *Server) meshCapabilities(_ context.Context, r *Request) (any, error) {
	if err := NoParams(r); err != nil {
		return nil, err
	}
	out := []protocol.Capability{}
	if cl, ok := s.mesh.(CapabilityLister); ok {
		out = append(out, cl.Capabilities()...)
	}
	return out, nil
}

// Capabilities runs mesh.capabilities: the capability objects the node
// serves itself, sorted by name.
func (c *Client) Capabilities(ctx context.Context) ([]protocol.Capability, error) {
	var out []protocol.Capability
	if err := c.Call(ctx, MethodMeshCapabilities, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}
