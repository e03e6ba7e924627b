package localapi

import (
	"context"

	"github.com/meshagent/meshagent/rpc"
)

// durables serves mesh.durables (rpc.MethodMeshDurables), which takes no
// params: the durable subscription names the node keeps positions for,
// [] when none. A node's refusal (INVALID_MESSAGE: it keeps no
// positions) is -32602.
func (m methods) durables(ctx context.Context, r *rpc.Request) (any, error) {
	if err := rpc.NoParams(r); err != nil {
		return nil, err
	}
	list, err := m.n.Durables(ctx)
	if err != nil {
		return nil, rpc.MeshParamsError(err)
	}
	list.Durables = orEmpty(list.Durables)
	return list, nil
}

// forgetDurable serves mesh.forgetDurable (rpc.MethodMeshForgetDurable),
// params read by rpc.ParseForgetDurableParams. A name a subscription on
// the node uses now, on any connection, is the node's refusal: -32602.
func (m methods) forgetDurable(ctx context.Context, r *rpc.Request) (any, error) {
	p, err := rpc.ParseForgetDurableParams(r.Params)
	if err != nil {
		return nil, err
	}
	forgotten, err := m.n.ForgetDurable(ctx, p.Durable)
	if err != nil {
		return nil, rpc.MeshParamsError(err)
	}
	return rpc.ForgetDurableResult{Durable: p.Durable, Forgotten: forgotten}, nil
}
