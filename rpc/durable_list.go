package rpc

import (
	"context"

	"github.com/meshagent/meshagent/protocol"
)

// MethodMeshDurables lists the durable subscription names a node keeps
// (no params; result a protocol.DurableList). Package localapi serves it.
const MethodMeshDurables = "mesh.durables"

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
