package lobby

import (
	"context"
	"encoding/json"

	"github.com/meshagent/meshagent/protocol"
)

// Serve forwards a request from the mesh to the lobby agent serving
// capability (see Capabilities) as a REQUEST with sender_id =
// requesterAgentID (normalised to its peer ID form when it is a mesh agent
// id) and a fresh conversation_id, and waits for the final RESPONSE. The
// §5.3 check compares requesterAgentID with the capability's
// authorized_requester_ids, both normalised. params must be a JSON object
// (or empty); its members follow capability_name in the REQUEST payload.
// The result is the final RESPONSE payload without "status".
//
// Errors are *protocol.Error: CAPABILITY_NOT_SUPPORTED (no connected agent
// offers it; details list the available names), UNAUTHORIZED,
// INVALID_MESSAGE (bad params), TIMEOUT (ctx's deadline or
// Config.RequestTimeout passed), INTERNAL_ERROR (the agent
// disconnected, the lobby closed); a RESPONSE with status "error" becomes
// an error with the payload's code if it is a known one (INTERNAL_ERROR
// otherwise) and its error text as message.
func (l *Lobby) Serve(ctx context.Context, requesterAgentID string, capability string, params json.RawMessage) (json.RawMessage, error) {
	if l.ctx.Err() != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "lobby closed")
	}
	requester := normalizeAgentID(requesterAgentID)
	if requester == "" || len(requester) > MaxIDLen {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "lobby: requester agent id must be 1 to %d bytes", MaxIDLen)
	}
	if err := (&protocol.Capability{Name: capability}).Validate(); err != nil {
		return nil, protocol.AsError(err)
	}
	var members []member
	if p := trimJSONSpace(params); len(p) > 0 && !isNull(p) {
		var err error
		if !json.Valid(p) {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "lobby: params are not JSON")
		}
		if members, err = objectMembers(p); err != nil {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "lobby: params must be a JSON object: %v", err)
		}
	}
	payload := buildObject([]member{{name: "capability_name", raw: json.RawMessage(strconvQuote(capability))}}, members, "capability_name")
	provider, ok := l.serving(capability)
	if !ok {
		names := make([]string, 0)
		for _, c := range l.Capabilities() {
			names = append(names, c.Name)
		}
		return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "no lobby agent offers capability %q", capability).
			WithDetails(map[string]any{"requested": capability, "available": names})
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
	defer cancel()
	res, pe := l.forward(ctx, provider, requester, protocol.NewID(), capability, payload, nil)
	if pe != nil {
		return nil, pe
	}
	return resultOf(res)
}

// serving returns the agent that serves capability: of the connected
// agents offering it, the one that attached last.
func (l *Lobby) serving(capability string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var best *connectedAgent
	for _, a := range l.agents {
		if findCapability(a.caps, capability) != nil && (best == nil || a.seq > best.seq) {
			best = a
		}
	}
	if best == nil {
		return "", false
	}
	return best.id, true
}

// resultOf turns a final RESPONSE payload into Serve's result or error.
func resultOf(payload json.RawMessage) (json.RawMessage, error) {
	members, err := objectMembers(payload)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "lobby agent answered a payload that is not an object")
	}
	status, _, _ := payloadString(members, "status")
	if status != string(protocol.StatusError) {
		return buildObject(nil, members, "status"), nil
	}
	pe := &protocol.Error{Code: protocol.CodeInternalError}
	if code, _, _ := payloadString(members, "code"); protocol.Code(code).Valid() {
		pe.Code = protocol.Code(code)
	}
	pe.Message, _, _ = payloadString(members, "error")
	if pe.Message == "" {
		pe.Message = "the lobby agent answered with status error"
	}
	for _, mb := range members {
		if mb.name == "details" && !isNull(mb.raw) {
			pe.Details = mb.raw
		}
	}
	return nil, pe
}
