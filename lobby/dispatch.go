package lobby

import (
	"github.com/meshagent/meshagent/protocol"
)

// handleFrame serves one message from a client, on its read loop.
func (l *Lobby) handleFrame(c *conn, frame []byte) {
	m, err := ParseMessage(frame)
	if err != nil {
		if m != nil && m.MessageType == TypeError {
			c.log.Debug("dropped a malformed ERROR", "err", err)
			return
		}
		l.sendError(c, m, protocol.AsError(err))
		return
	}
	switch m.MessageType {
	case TypeRegister:
		l.register(c, m)
	case TypeDiscoverServices, TypeRequest, TypeResponse, TypeError:
		agent, pe := l.authenticate(c, m)
		if pe != nil {
			if m.MessageType == TypeError {
				c.log.Debug("dropped an ERROR that failed authentication", "err", pe.Message)
				return
			}
			l.sendError(c, m, pe)
			return
		}
		switch m.MessageType {
		case TypeDiscoverServices:
			l.discover(c, m, agent)
		case TypeRequest:
			l.request(c, m, agent)
		case TypeResponse:
			l.response(c, m, agent)
		default:
			l.agentError(c, m, agent)
		}
	case TypeRegisterAck, TypeServicesAvailable:
		l.sendError(c, m, protocol.Errorf(protocol.CodeInvalidMessage, "message_type %s is sent by the lobby, not to it", m.MessageType))
	default:
		l.sendError(c, m, protocol.Errorf(protocol.CodeInvalidMessage, "unknown message_type %q (the lobby serves REGISTER, DISCOVER_SERVICES, REQUEST, RESPONSE, ERROR)", m.MessageType))
	}
}

// sendError answers m (nil if the frame was not a message at all) with an
// ERROR.
func (l *Lobby) sendError(c *conn, m *Message, pe *protocol.Error) {
	out := &Message{SenderID: l.cfg.ID, MessageType: TypeError}
	p := ErrorPayload{Error: pe.Message, Code: pe.Code}
	if m != nil {
		out.ReceiverID, out.ConversationID = m.SenderID, m.ConversationID
		p.OriginalMessageType, p.OriginalConversationID = m.MessageType, m.ConversationID
	}
	if p.Error == "" {
		p.Error = string(pe.Code)
	}
	b, err := marshal(p)
	if err != nil {
		return
	}
	out.Payload = b
	c.log.Debug("lobby error", "code", pe.Code, "err", pe.Message)
	_ = c.sendMsg(out)
}
