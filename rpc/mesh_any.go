package rpc

import (
	"context"
	"fmt"

	"github.com/meshagent/meshagent/protocol"
)

// AnyCaller is a Mesh that can choose the provider of a call itself;
// *node.Node is one. On a server whose Mesh is an AnyCaller, mesh.call
// without "agentId" calls any agent that offers the capability, and its
// result names the agent that answered (CallResult.AgentID).
type AnyCaller interface {
	// CallAny is Mesh.Call with req.To empty: it returns the response and
	// the agent id of the provider that answered. It must return when
	// ctx ends.
	CallAny(ctx context.Context, req protocol.CallRequest) (*protocol.Response, string, error)
}

// CallResult is the result of a mesh.call without "agentId": the final
// response and the agent that answered. A call naming its agent returns
// the response alone, as it always has.
type CallResult struct {
	protocol.Response
	AgentID string `json:"agentId"`
}

func callAny(ctx context.Context, m AnyCaller, req protocol.CallRequest) (any, error) {
	resp, agent, err := m.CallAny(ctx, req)
	if err != nil {
		return nil, protocol.AsError(err)
	}
	if resp == nil {
		return nil, fmt.Errorf("mesh returned no response")
	}
	return CallResult{Response: *resp, AgentID: agent}, nil
}
