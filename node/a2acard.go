package node

import (
	"context"
	"encoding/json"

	"github.com/meshagent/meshagent/protocol"
)

// JWSSigner signs a payload as a JWS whose protected header it builds
// itself; the node's *sign.Signer is one. It is all of the key a CardFunc
// sees: it cannot sign an envelope (a JWS signing input starts with "eyJ",
// an envelope's canonical JSON with "{").
type JWSSigner interface {
	SignJWS(payload []byte) (protected, signature string)
}

// CardFunc builds and signs the node's A2A Agent Card for the a2a.card
// built-in, from the node's identity, display name, announced capabilities
// and the request's params. The A2A shapes live outside node (the a2a
// package's OwnCard), so the process that assembles a node passes one with
// WithAgentCard.
type CardFunc func(s JWSSigner, agentID, name string, caps []protocol.Capability, params json.RawMessage) (json.RawMessage, error)

// cardBuiltin serves protocol.A2ACardCapability: anyone may read an
// agent's card, as anyone may read its hello.
func (n *Node) cardBuiltin() *service {
	f := n.cfg.AgentCard
	return &service{
		Service: Service{
			Capability: protocol.Capability{Name: protocol.A2ACardCapability},
			Handler: HandlerFunc(func(_ context.Context, c *Call) (json.RawMessage, error) {
				return f(n.signer, n.idStr, n.cfg.Name, n.Capabilities(), c.Request.Params)
			}),
		},
		admit: admitAll,
	}
}
