package rpc

import (
	"context"
)

// DurableForgetter is implemented by a Mesh that can forget a durable
// subscription's position (*node.Node is one). A node keeps positions for
// a bounded number of names: past it, mesh.subscribe under a new name is
// refused (-32602), and mesh.forgetDurable is how a client makes room.
type DurableForgetter interface {
	// ForgetDurable deletes the position kept for name and reports
	// whether there was one. A name in use on the node is refused with a
	// *protocol.Error of INVALID_MESSAGE.
	ForgetDurable(ctx context.Context, name string) (bool, error)
}

// MethodMeshForgetDurable forgets a durable subscription's position.
const MethodMeshForgetDurable = "mesh.forgetDurable"

// ForgetDurableParams are the params of mesh.forgetDurable.
type ForgetDurableParams struct {
	Durable string `json:"durable,required"`
}

// ForgetDurableResult is the result of mesh.forgetDurable: whether the
// node kept a position for the name.
type ForgetDurableResult struct {
	Durable   string `json:"durable"`
	Forgotten bool   `json:"forgotten"`
}

var forgetDurableShape = objectShape(MethodMeshForgetDurable, &ForgetDurableParams{})

// meshForgetDurable serves mesh.forgetDurable. A durable subscription of
// the name on any connection must be unsubscribed first (-32602).
func (s *Server) meshForgetDurable(ctx context.Context, r *Request) (any, error) {
	df, ok := s.mesh.(DurableForgetter)
	if !ok {
		return nil, Errorf(CodeInvalidParams, "invalid params: this node runs no durable subscriptions")
	}
	var p ForgetDurableParams
	if err := forgetDurableShape.decode(r.Params, &p); err != nil {
		return nil, err
	}
	if err := nonEmpty("durable", p.Durable); err != nil {
		return nil, err
	}
	forgotten, err := df.ForgetDurable(ctx, p.Durable)
	if err != nil {
		return nil, meshParamsError(err)
	}
	return ForgetDurableResult{Durable: p.Durable, Forgotten: forgotten}, nil
}

// ForgetDurable runs mesh.forgetDurable: the node forgets the position of
// the durable subscription name (unsubscribed first), and a later
// SubscribeDurable of it starts from now. It reports whether the node
// kept one.
func (c *Client) ForgetDurable(ctx context.Context, name string) (bool, error) {
	var res ForgetDurableResult
	if err := c.Call(ctx, MethodMeshForgetDurable, ForgetDurableParams{Durable: name}, &res); err != nil {
		return false, err
	}
	return res.Forgotten, nil
}
