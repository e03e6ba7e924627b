package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// OnMessageResult is the result of mesh.onMessage.
type OnMessageResult struct {
	OK bool `json:"ok"`
}

// meshOnMessage serves mesh.onMessage: the connection takes the node's
// direct messages from now on, sharing them with any other connection
// that does (fewest in flight first).
func (s *Server) meshOnMessage(_ context.Context, r *Request) (any, error) {
	if err := localOnly(r); err != nil {
		return nil, err
	}
	var p struct{}
	if err := DecodeParams(r.Method, r.Params, &p); err != nil {
		return nil, err
	}
	t := s.serving
	t.offerMu.Lock()
	defer t.offerMu.Unlock()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, ErrServerClosed
	}
	sc := t.conn(r.Conn)
	sc.messages = true
	install := t.messages == nil
	if install {
		t.messages = newPool()
	}
	t.messages.add(sc)
	t.mu.Unlock()
	if install {
		t.p.OnMessage(t.message)
	}
	r.Conn.log.Info("client takes direct messages", "client_id", r.Conn.ClientID())
	return OnMessageResult{OK: true}, nil
}

// expireMessages gives the direct messages back to the node's default
// once their grace passed with no connection taking them.
func (t *serveTable) expireMessages(p *pool) {
	t.offerMu.Lock()
	defer t.offerMu.Unlock()
	t.mu.Lock()
	if t.closed || t.messages != p || len(p.conns) > 0 {
		t.mu.Unlock()
		return
	}
	p.drop()
	t.messages = nil
	t.mu.Unlock()
	t.log.Info("direct messages no longer taken: no client asked for them again within the grace", "grace", t.grace)
	t.p.OnMessage(nil)
}

// message is the MessageHandler the node calls once per (sender, message
// id): mesh.agentMessage to a connection that takes direct messages.
func (t *serveTable) message(ctx context.Context, from string, m protocol.AgentMessage) (json.RawMessage, error) {
	sc, release, err := t.pick(ctx, func() *pool { return t.messages })
	if errors.Is(err, errNoServer) {
		return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "no client of this agent takes direct messages any longer")
	}
	if err != nil {
		return nil, err
	}
	defer release()
	var res json.RawMessage
	err = sc.c.Call(ctx, MethodMeshAgentMessage, AgentMessageParams{From: from, Message: m}, &res)
	switch {
	case err == nil:
		return res, nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("rpc: message %s: %w", m.MessageID, ctx.Err())
	case errors.Is(err, ErrClosed), errors.Is(err, ErrSlowConsumer):
		return nil, protocol.Errorf(protocol.CodeInternalError, "the client taking direct messages disconnected before it answered")
	}
	if pe := ProtocolError(err); pe != nil {
		pe.CorrelationID = ""
		return nil, pe
	}
	return nil, protocol.Errorf(protocol.CodeInternalError, "the client taking direct messages failed: %v", err)
}

// meshSendMessage serves mesh.sendMessage through the node's at-least-once
// delivery.
func (s *Server) meshSendMessage(ctx context.Context, r *Request) (any, error) {
	if err := localOnly(r); err != nil {
		return nil, err
	}
	switch typ := seedType(r.Params); typ {
	case "", "-":
	default:
		return s.seedSend(ctx, typ, r.Params)
	}
	var p SendMessageParams
	if err := DecodeParams(r.Method, r.Params, &p); err != nil {
		return nil, err
	}
	if p.AgentID == "" {
		return nil, Errorf(CodeInvalidParams, `invalid params: "agentId" is required`)
	}
	id, err := sign.ParseAgentID(p.AgentID)
	if err != nil {
		return nil, Errorf(CodeInvalidParams, `invalid params: "agentId": %v`, err)
	}
	var m protocol.AgentMessage
	if len(p.Message) == 0 || p.Message[0] != '{' {
		return nil, Errorf(CodeInvalidParams, `invalid params: "message" must be an object {"message_id", "subject", "body", "priority", "requires_response", "context"}`)
	}
	if err := decodeStrict(p.Message, &m); err != nil {
		return nil, Errorf(CodeInvalidParams, `invalid params: "message": %v`, err)
	}
	if m.MessageID == "" {
		m.MessageID = protocol.NewID()
	}
	if m.Priority == "" {
		m.Priority = protocol.PriorityNormal
	}
	if err := m.Validate(); err != nil {
		return nil, Errorf(CodeInvalidParams, `invalid params: "message": %v`, err)
	}
	res, err := s.cfg.Provider.SendMessage(ctx, id.String(), m)
	if errors.Is(err, ErrQueued) {
		return SendMessageResult{MessageID: m.MessageID, Queued: true}, nil
	}
	if err != nil {
		return nil, sendError(m.MessageID, id.String(), err)
	}
	out := SendMessageResult{MessageID: m.MessageID}
	if len(res) > 0 && !isNull(res) {
		out.Response = res
	}
	return out, nil
}

// sendError is the error mesh.sendMessage answers for a Provider's
// SendMessage error that is not ErrQueued: -32005 when the message was
// not accepted because the node's store cannot write (ErrNotAccepted),
// else the AgentProtocol error it carries.
func sendError(messageID, to string, err error) error {
	if errors.Is(err, ErrNotAccepted) {
		return Errorf(CodeServerBusy, "server busy: %v; message %s for agent %s not accepted, send it again later", err, messageID, to)
	}
	return protocol.AsError(err)
}
