package rpc

import (
	"context"
	"encoding/json"

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

// CallResult is the result of mesh.call: the final response, with the
// agent that answered when the call named none, and the provider's
// receipt when it was asked for. A call naming its agent and asking no
// receipt returns the response alone, as it always has.
type CallResult struct {
	protocol.Response
	// AgentID is the provider that answered a mesh.call without
	// "agentId"; absent when the call named it.
	AgentID string `json:"agentId,omitempty"`
	// Receipt is the provider's signed final response envelope in the
	// embedded JSON form (protocol.OpenReceipt checks it), present when
	// the call asked for it with "receipt": true. A mesh that keeps no
	// signed answers (CallRequest.Signed is never called) leaves it out.
	Receipt json.RawMessage `json:"receipt,omitempty"`
}
