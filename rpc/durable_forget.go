package rpc

import (
	"context"
	"encoding/json"
)

// MethodMeshForgetDurable forgets a durable subscription's position. A
// node keeps positions for a bounded number of names: past it,
// mesh.subscribe under a new name is refused (-32602), and
// mesh.forgetDurable is how a client makes room. Package localapi serves
// it.
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

// ParseForgetDurableParams reads mesh.forgetDurable's params strictly: an
// object with a non-empty "durable" of at most MaxTopicLen bytes and
// nothing else; anything else is -32602.
func ParseForgetDurableParams(raw json.RawMessage) (ForgetDurableParams, error) {
	var p ForgetDurableParams
	if err := forgetDurableShape.decode(raw, &p); err != nil {
		return p, err
	}
	return p, nonEmpty("durable", p.Durable)
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
