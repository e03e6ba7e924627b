package rpc

import (
	"context"

	"github.com/meshagent/meshagent/protocol"
)

// DurableLister is implemented by a Mesh that can list the durable
// subscription names it keeps positions for (*node.Node is one): what an
// operator reads when mesh.subscribe under a new name is refused for the
// bound, before forgetting one (mesh.forgetDurable).
type DurableLister interface {
	// Durables returns the names, sorted, each with its position's size
	// and whether a subscription of it runs on the node now, and how many
	// names the node keeps at most. A node that keeps no positions
	// refuses with a *protocol.Error of INVALID_MESSAGE.
	Durables(ctx context.Context) (protocol.DurableList, error)
}

// MethodMeshDurables lists the durable subscription names a node keeps.
const MethodMeshDurables = "mesh.durables"

// meshDurables serves mesh.durables, which takes no params.
func (s *Server) meshDurables(ctx context.Context, r *Request) (any, error) {
	dl, ok := s.mesh.(DurableLister)
	if !ok {
		return nil, Errorf(CodeInvalidParams, "invalid params: this node runs no durable subscriptions")
	}
	if err := NoParams(r); err != nil {
		return nil, err
	}
	list, err := dl.Durables(ctx)
	if err != nil {
		return nil, meshParamsError(err)
	}
	list.Durables = orEmptySlice(list.Durables)
	return list, nil
}

// Durables runs mesh.durables: the durable subscription names the node
// keeps positions for, sorted, each with its position's size in bytes and
// whether a subscription of it runs now (which ForgetDurable refuses),
// and the most names the node keeps.
func (c *Client) Durables(ctx context.Context) (protocol.DurableList, error) {
	var res protocol.DurableList
	if err := c.Call(ctx, MethodMeshDurables, nil, &res); err != nil {
		return protocol.DurableList{}, err
	}
	return res, nil
}

// orEmptySlice makes a nil slice encode as [] rather than null.
func orEmptySlice[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
