package protocol

import (
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/sign"
)

// Receipt is a checked delivery receipt: a provider's signed final
// response to one request, as the caller received it (CallRequest.Signed)
// and kept it in the embedded JSON form. Anyone holding it can show, with
// no network and no trust in the caller, that the provider answered that
// request and what it answered: the signature covers the canonical bytes
// the provider sent, from.agentId names the provider and the payload's
// correlationId the request.
type Receipt struct {
	// Provider is the agent that signed the response.
	Provider peer.ID
	// Envelope is the verified response envelope.
	Envelope *Envelope
	// Response is its payload: the request's correlation id, the final
	// status and the result.
	Response *Response
}

// OpenReceipt verifies a receipt in the embedded JSON form: a
// well-formed envelope whose signature verifies for the key of its
// from.agentId (OpenJSON), of type response, with a final status
// (success or error). Errors are *Error: INVALID_SIGNATURE when the
// signature does not hold, INVALID_MESSAGE for anything else. It says
// nothing of which provider or request the receipt is for: see Check.
func OpenReceipt(doc []byte) (*Receipt, error) {
	e, _, err := OpenJSON(doc)
	if err != nil {
		return nil, err
	}
	if e.Type != TypeResponse {
		return nil, Errorf(CodeInvalidMessage, "a receipt is a response envelope, not a %s one", e.Type)
	}
	resp, err := DecodeResponse(e)
	if err != nil {
		return nil, err
	}
	if !resp.Status.Final() {
		return nil, Errorf(CodeInvalidMessage, "a receipt is a final response, not an %s one", resp.Status)
	}
	from, err := e.Sender()
	if err != nil {
		return nil, err
	}
	return &Receipt{Provider: from, Envelope: e, Response: resp}, nil
}

// Check reports whether the receipt is the one expected: signed by
// provider (an agent id in either form) and answering the request whose
// correlation id (its task id) is correlationID. An empty argument is not
// checked. A receipt from another agent is INVALID_SIGNATURE (a valid
// signature by the wrong key proves nothing about provider); one for
// another request is INVALID_MESSAGE.
func (r *Receipt) Check(provider, correlationID string) error {
	if provider != "" {
		want, err := sign.ParseAgentID(provider)
		if err != nil {
			return Errorf(CodeInvalidMessage, "provider: %v", err)
		}
		if r.Provider != want {
			return Errorf(CodeInvalidSignature, "the receipt is signed by %s, not by the provider %s", r.Provider, want)
		}
	}
	if correlationID != "" && r.Response.CorrelationID != correlationID {
		return Errorf(CodeInvalidMessage, "the receipt answers request %q, not %q", truncate(r.Response.CorrelationID, MaxIDLen), truncate(correlationID, MaxIDLen))
	}
	return nil
}
