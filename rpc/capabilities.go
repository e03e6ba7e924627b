package rpc

import (
	"context"

	"github.com/meshagent/meshagent/protocol"
)

// MethodMeshCapabilities lists the capability objects the node serves
// itself (its capabilities file, its built-ins and what clients offer with
// mesh.serve), in full: schemas, descriptions and keywords. mesh.status
// names them only; the MCP server needs their schemas. Like mesh.status it
// is one of the operator's methods, served with a Control (WithControl),
// which lists them.
const MethodMeshCapabilities = "mesh.capabilities"

func (s *Server) meshCapabilities(_ context.Context, r *Request) (any, error) {
	if err := NoParams(r); err != nil {
		return nil, err
	}
	return append([]protocol.Capability{}, s.cfg.Control.Capabilities()...), nil
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
