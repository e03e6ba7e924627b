package rpc

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/meshagent/meshagent/protocol"
)

// AnyCaller is a mesh that can choose the provider of a call itself;
// *node.Node is one. On a server built WithAnyCaller, mesh.call without
// "agentId" calls any agent that offers the capability, and its result
// names the agent that answered (CallResult.AgentID); elsewhere "agentId"
// is required. Implementations must be safe for concurrent use.
type AnyCaller interface {
	// CallAny is Mesh.Call with req.To empty: it returns the response and
	// the agent id of the provider that answered. It must return when
	// ctx ends.
	CallAny(ctx context.Context, req protocol.CallRequest) (*protocol.Response, string, error)
}

// WithAnyCaller serves mesh.call without "agentId" through a (usually
// the server's Mesh itself: rpc.New(n, rpc.WithAnyCaller(n))). A nil a
// is refused.
func WithAnyCaller(a AnyCaller) Option {
	return func(cfg *Config) error {
		if a == nil {
			return errors.New("nil AnyCaller")
		}
		cfg.AnyCaller = a
		return nil
	}
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
