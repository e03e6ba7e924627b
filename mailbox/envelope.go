package mailbox

import (
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Open verifies an envelope as a mailbox holds it, in its embedded JSON
// form: its signature by the agent it names as sender, that it is a
// request (of any capability: a direct message, agent.message, or a call
// forwarded for its sender, such as a bus message to agent:<id>), and
// that it is addressed to to. The relay checks it on deposit and the
// recipient again on fetch: the recipient trusts no relay. It returns the
// envelope and its decoded request. Freshness (the envelope's time) is
// the caller's to judge: a mailbox holds envelopes for days. Whether the
// sender may call the capability is the recipient's to decide, as for a
// live request: the relay knows nothing of its ACLs and policy.
func Open(doc []byte, to peer.ID) (*protocol.Envelope, *protocol.Request, error) {
	e, _, err := protocol.OpenJSON(doc)
	if err != nil {
		return nil, nil, err
	}
	if e.Type != protocol.TypeRequest {
		return nil, nil, protocol.Errorf(protocol.CodeInvalidMessage, "a mailbox holds requests, not %s", e.Type)
	}
	if e.To == nil {
		return nil, nil, protocol.Errorf(protocol.CodeInvalidMessage, "envelope has no recipient")
	}
	if id, err := sign.ParseAgentID(e.To.AgentID); err != nil || id != to {
		return nil, nil, protocol.Errorf(protocol.CodeUnknownAgent, "envelope is addressed to %.64s, not to %s", e.To.AgentID, to)
	}
	req, err := protocol.DecodeRequest(e)
	if err != nil {
		return nil, nil, err
	}
	return e, req, nil
}

// itemID names the item holding envelope e from from to to: an ack names
// it, and the prefix lets the relay check, with no read, that an ack
// deletes only the acknowledging agent's items.
func itemID(to, from peer.ID, envelopeID string) string {
	return fmt.Sprintf("%s/%s/%s", to, from, envelopeID)
}
