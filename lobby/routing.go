package lobby

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// pendingKey identifies a forwarded REQUEST awaiting its RESPONSE.
type pendingKey struct{ provider, requester, conv string }

// pendingRequest is a forwarded REQUEST awaiting its RESPONSE. progress
// (may be nil) receives in_progress payloads on the provider's read loop
// and must not block; done receives the final payload once.
type pendingRequest struct {
	progress func(json.RawMessage)
	done     chan json.RawMessage
}

// request serves REQUEST.
func (l *Lobby) request(c *conn, m *Message, agent string) {
	members, name, pe := capabilityName(m.Payload, TypeRequest)
	if pe != nil {
		l.sendError(c, m, pe)
		return
	}
	if m.ReceiverID == "" {
		l.sendError(c, m, protocol.Errorf(protocol.CodeInvalidMessage, `REQUEST needs "receiver_id": the agent to call`))
		return
	}
	conv := m.ConversationID
	if conv == "" {
		conv = protocol.NewID()
	}
	if !c.spawn(func() { l.route(c, agent, m, name, members, conv) }) {
		l.sendError(c, m, busy(c))
	}
}

// capabilityName reads and validates a payload's capability_name.
func capabilityName(payload json.RawMessage, msgType string) ([]member, string, *protocol.Error) {
	members, _ := objectMembers(payload) // checked by ParseMessage
	name, _, err := payloadString(members, "capability_name")
	if err != nil {
		return nil, "", protocol.AsError(err)
	}
	if name == "" {
		return nil, "", protocol.Errorf(protocol.CodeInvalidMessage, `%s payload needs "capability_name"`, msgType)
	}
	if err := (&protocol.Capability{Name: name}).Validate(); err != nil {
		return nil, "", protocol.Errorf(protocol.CodeInvalidMessage, "%s payload: %s", msgType, protocol.AsError(err).Message)
	}
	return members, name, nil
}

func busy(c *conn) *protocol.Error {
	return protocol.Errorf(protocol.CodeRateLimited, "busy: %d requests already in flight on this connection", c.l.cfg.Limits.MaxConcurrentCalls)
}

// route delivers a REQUEST to a lobby agent or a mesh agent and sends the
// requester the RESPONSEs.
func (l *Lobby) route(c *conn, agent string, m *Message, name string, members []member, conv string) {
	receiver := m.ReceiverID
	reply := func(from string, payload json.RawMessage) {
		_ = c.sendMsg(&Message{SenderID: from, ReceiverID: agent, MessageType: TypeResponse, Payload: payload, ConversationID: conv})
	}
	fail := func(pe *protocol.Error) {
		c.log.Debug("request failed", "receiver", receiver, "capability", name, "code", pe.Code, "err", pe.Message)
		reply(l.cfg.ID, errorPayload(pe))
	}
	ctx, cancel := context.WithTimeout(c.ctx, l.cfg.RequestTimeout)
	defer cancel()

	if receiver == l.cfg.ID {
		fail(protocol.Errorf(protocol.CodeCapabilityNotSupported, "the lobby itself offers no capabilities; send REQUEST to an agent"))
		return
	}
	l.mu.Lock()
	connected := l.agents[receiver] != nil
	l.mu.Unlock()
	if connected {
		res, pe := l.forward(ctx, receiver, agent, conv, name, m.Payload, func(p json.RawMessage) { reply(receiver, p) })
		if pe != nil {
			fail(pe)
			return
		}
		reply(receiver, res)
		return
	}
	sctx, scancel := l.storeCtx(c)
	_, err := l.st.Registration(sctx, receiver)
	scancel()
	if err == nil {
		fail(protocol.Errorf(protocol.CodeUnknownAgent, "agent %q is registered but not connected to the lobby", receiver))
		return
	}
	id, perr := sign.ParseAgentID(receiver)
	if perr != nil {
		fail(protocol.Errorf(protocol.CodeUnknownAgent, "no agent %q: it is not connected to the lobby and is not a mesh agent id", receiver))
		return
	}
	l.callMesh(ctx, agent, id.String(), name, members, func(p json.RawMessage) { reply(receiver, p) }, fail)
}

// forward sends a REQUEST to a connected lobby agent after the §5.3
// check and waits for its final RESPONSE payload.
func (l *Lobby) forward(ctx context.Context, provider, requester, conv, capability string, payload json.RawMessage, progress func(json.RawMessage)) (json.RawMessage, *protocol.Error) {
	key := pendingKey{provider: provider, requester: requester, conv: conv}
	p := &pendingRequest{progress: progress, done: make(chan json.RawMessage, 1)}
	l.mu.Lock()
	a := l.agents[provider]
	if a == nil {
		l.mu.Unlock()
		return nil, protocol.Errorf(protocol.CodeUnknownAgent, "agent %q is not connected to the lobby", provider)
	}
	c := findCapability(a.caps, capability)
	if c == nil {
		names := make([]string, 0, len(a.caps))
		for _, c := range a.caps {
			names = append(names, c.Name)
		}
		l.mu.Unlock()
		return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "agent %q does not offer capability %q", provider, capability).
			WithDetails(map[string]any{"requested": capability, "available": names})
	}
	if !authorizedFor(c, requester) {
		l.mu.Unlock()
		l.log.Info("request denied authorization", "requester", requester, "provider", provider, "capability", capability)
		return nil, protocol.Errorf(protocol.CodeUnauthorized, "Unauthorized: Agent '%s' is not authorized to call capability '%s' on agent '%s'.", requester, capability, provider)
	}
	if l.pending[key] != nil {
		l.mu.Unlock()
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "a REQUEST from %q to %q with conversation_id %q is already waiting for its RESPONSE", requester, provider, conv)
	}
	l.pending[key] = p
	conn := a.conn
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		if l.pending[key] == p {
			delete(l.pending, key)
		}
		l.mu.Unlock()
	}()
	l.log.Debug("request authorized", "requester", requester, "provider", provider, "capability", capability, "conversation_id", conv)
	err := conn.sendMsg(&Message{SenderID: requester, ReceiverID: provider, MessageType: TypeRequest, Payload: payload, ConversationID: conv})
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "agent %q could not be reached: %v", provider, err)
	}
	select {
	case res := <-p.done:
		return res, nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, protocol.Errorf(protocol.CodeTimeout, "agent %q did not answer in time", provider)
		}
		return nil, protocol.Errorf(protocol.CodeInternalError, "request cancelled")
	case <-conn.ctx.Done():
		return nil, protocol.Errorf(protocol.CodeInternalError, "agent %q disconnected before it answered", provider)
	case <-l.ctx.Done():
		return nil, protocol.Errorf(protocol.CodeInternalError, "lobby closed")
	}
}

func findCapability(caps []protocol.Capability, name string) *protocol.Capability {
	for i := range caps {
		if caps[i].Name == name {
			return &caps[i]
		}
	}
	return nil
}

// authorizedFor applies seed 000 §5.3: an empty (or absent)
// authorized_requester_ids is public; otherwise the requester must be
// listed. Mesh agent ids match in either form.
func authorizedFor(c *protocol.Capability, requester string) bool {
	if c.Public() {
		return true
	}
	want := normalizeAgentID(requester)
	for _, a := range c.AuthorizedRequesterIDs {
		if a == requester || normalizeAgentID(a) == want {
			return true
		}
	}
	return false
}

// response serves a RESPONSE from a provider: it is routed to the REQUEST
// it answers, or refused.
func (l *Lobby) response(c *conn, m *Message, agent string) {
	members, _ := objectMembers(m.Payload)
	status, _, err := payloadString(members, "status")
	if err != nil || status == "" {
		l.sendError(c, m, protocol.Errorf(protocol.CodeInvalidMessage, `RESPONSE payload needs a "status" string`))
		return
	}
	if !l.settle(agent, m.ReceiverID, m.ConversationID, m.Payload, status != string(protocol.StatusInProgress)) {
		l.sendError(c, m, protocol.Errorf(protocol.CodeInvalidMessage, "no REQUEST from %q with conversation_id %q is waiting for a RESPONSE from %q", m.ReceiverID, m.ConversationID, agent))
	}
}

// settle hands a RESPONSE payload to the REQUEST it answers, and reports
// whether there was one.
func (l *Lobby) settle(provider, requester, conv string, payload json.RawMessage, final bool) bool {
	key := pendingKey{provider: provider, requester: normalizeAgentID(requester), conv: conv}
	l.mu.Lock()
	p := l.pending[key]
	if p != nil && final {
		delete(l.pending, key)
	}
	l.mu.Unlock()
	switch {
	case p == nil:
		return false
	case final:
		p.done <- payload // buffered; the entry was removed, so only once
	case p.progress != nil:
		p.progress(payload)
	}
	return true
}

// agentError serves an ERROR an agent sends: if it concerns a pending
// REQUEST, that REQUEST ends with a RESPONSE with status "error";
// otherwise it is dropped. It is never answered.
func (l *Lobby) agentError(c *conn, m *Message, agent string) {
	members, _ := objectMembers(m.Payload)
	text, _, _ := payloadString(members, "error")
	if text == "" {
		text = "the agent reported an error"
	}
	pe := protocol.Errorf(protocol.CodeInternalError, "%s", text)
	if code, _, _ := payloadString(members, "code"); protocol.Code(code).Valid() {
		pe.Code = protocol.Code(code)
	}
	if !l.settle(agent, m.ReceiverID, m.ConversationID, errorPayload(pe), true) {
		c.log.Debug("dropped an ERROR from an agent", "agent", agent, "receiver", m.ReceiverID, "error", text)
	}
}

// errorPayload is a RESPONSE payload with status "error".
func errorPayload(pe *protocol.Error) json.RawMessage {
	p := ErrorResponse{Status: protocol.StatusError, Error: pe.Message, Code: pe.Code}
	if p.Error == "" {
		p.Error = string(pe.Code)
	}
	if len(pe.Details) > 0 && json.Valid(pe.Details) {
		p.Details = pe.Details
	}
	b, err := marshal(p)
	if err != nil {
		return json.RawMessage(`{"status":"error","error":"internal error","code":"INTERNAL_ERROR"}`)
	}
	return b
}
