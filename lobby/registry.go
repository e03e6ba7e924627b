package lobby

import (
	"encoding/json"
	"errors"
	"strings"
	"unicode"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// checkAgentID validates an agent_id a client registers (or
// re-registers); a new one must also pass checkNewAgentID.
func (l *Lobby) checkAgentID(id string) *protocol.Error {
	switch {
	case id == "":
		return protocol.Errorf(protocol.CodeInvalidMessage, `REGISTER needs "sender_id": the agent_id to register`)
	case id == l.cfg.ID:
		return protocol.Errorf(protocol.CodeInvalidMessage, "agent_id %q is the lobby's own id", id)
	case strings.ContainsFunc(id, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }):
		return protocol.Errorf(protocol.CodeInvalidMessage, "agent_id %q must not contain whitespace or control characters", id)
	}
	if _, err := sign.ParseAgentID(id); err == nil {
		return protocol.Errorf(protocol.CodeInvalidMessage, "agent_id %q is a mesh agent id; a lobby agent needs a name of its own (mesh agents join the mesh directly)", id)
	}
	return nil
}

// register serves REGISTER.
func (l *Lobby) register(c *conn, m *Message) {
	id := m.SenderID
	if pe := l.checkAgentID(id); pe != nil {
		l.sendError(c, m, pe)
		return
	}
	caps, pe := parseRegisterPayload(m.Payload)
	if pe != nil {
		l.sendError(c, m, pe)
		return
	}
	capsJSON, err := json.Marshal(caps)
	if err != nil {
		l.sendError(c, m, protocol.Errorf(protocol.CodeInvalidMessage, "capabilities: %v", err))
		return
	}
	l.mu.Lock()
	bound := c.agent
	l.mu.Unlock()
	if bound != "" && bound != id {
		l.sendError(c, m, protocol.Errorf(protocol.CodeInvalidMessage, "this connection serves agent %q; register %q on a connection of its own", bound, id))
		return
	}
	ctx, cancel := l.storeCtx(c)
	defer cancel()
	l.regMu.Lock()
	defer l.regMu.Unlock()
	stored := false
	_, err = l.st.Registration(ctx, id)
	switch {
	case err == nil:
		if m.AuthToken == "" {
			l.sendError(c, m, protocol.Errorf(protocol.CodeUnauthorized, "agent_id %q is already registered: send REGISTER with its auth_token to re-register, or any message with it to reconnect", id))
			return
		}
		reg, err := l.st.RegistrationByToken(ctx, m.AuthToken)
		if err != nil || reg.AgentID != id {
			l.sendError(c, m, protocol.Errorf(protocol.CodeUnauthorized, "Authentication failed: invalid auth_token for agent %q", id))
			return
		}
	case errors.Is(err, store.ErrNotFound):
		if pe := l.checkNewAgentID(id); pe != nil {
			c.log.Info("lobby registration refused", "agent", id, "err", pe.Message)
			l.sendError(c, m, pe)
			return
		}
		if l.registered >= l.cfg.MaxRegistrations {
			c.log.Warn("lobby registration refused: too many agents", "agent", id, "max", l.cfg.MaxRegistrations)
			l.sendError(c, m, protocol.Errorf(protocol.CodeRateLimited, "the lobby holds the most registrations it may (%d); try another lobby", l.cfg.MaxRegistrations))
			return
		}
		l.registered++ // taken back below if the write fails
		defer func() {
			if !stored {
				l.registered--
			}
		}()
	default:
		c.log.Error("lobby store lookup failed", "agent", id, "err", err)
		l.sendError(c, m, protocol.Errorf(protocol.CodeInternalError, "registration failed: store unavailable"))
		return
	}
	token := l.newToken()
	if err := l.st.Register(ctx, store.Registration{AgentID: id, Token: token, Capabilities: capsJSON}); err != nil {
		c.log.Error("lobby registration not stored", "agent", id, "err", err)
		code := protocol.CodeInternalError
		if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrTooLarge) {
			code = protocol.CodeInvalidMessage
		}
		l.sendError(c, m, protocol.Errorf(code, "registration failed: %v", err))
		return
	}
	stored = true
	l.noteSkeleton(id)
	l.attach(c, id, caps)
	c.log.Info("lobby agent registered", "agent", id, "capabilities", len(caps))
	ack, _ := marshal(RegisterAckPayload{Status: RegisterStatus, LobbyID: l.cfg.ID, AuthToken: token})
	_ = c.sendMsg(&Message{SenderID: l.cfg.ID, ReceiverID: id, MessageType: TypeRegisterAck, Payload: ack, ConversationID: m.ConversationID})
}

// parseRegisterPayload reads and validates REGISTER's capabilities.
// Capability objects are decoded strictly (exact member names, no
// duplicates, each member of its type); members the lobby does not know
// are let through, as seed 000 leaves capability objects open.
func parseRegisterPayload(payload json.RawMessage) ([]protocol.Capability, *protocol.Error) {
	var p RegisterPayload
	if err := protocol.DecodeStrict(payload, &p, protocol.AllowUnknown()); err != nil {
		if fe, ok := errors.AsType[*protocol.FieldError](err); ok && fe.Field == "capabilities" && errors.Is(err, protocol.ErrWrongType) {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, `REGISTER payload: "capabilities" must be an array of capability objects`)
		}
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "REGISTER payload: %v", err)
	}
	caps := p.Capabilities
	if caps == nil {
		caps = []protocol.Capability{}
	}
	if len(caps) > MaxCapabilities {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "REGISTER payload: %d capabilities, the limit is %d", len(caps), MaxCapabilities)
	}
	seen := make(map[string]bool, len(caps))
	for i := range caps {
		if err := caps[i].Validate(); err != nil {
			pe := protocol.AsError(err)
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "REGISTER payload: %s", pe.Message)
		}
		if seen[caps[i].Name] {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "REGISTER payload: capability %q is listed twice", caps[i].Name)
		}
		seen[caps[i].Name] = true
	}
	return caps, nil
}

// attach binds c to agent id with caps; a connection the agent was
// attached on before stops serving it.
func (l *Lobby) attach(c *conn, id string, caps []protocol.Capability) {
	l.mu.Lock()
	if a := l.agents[id]; a != nil && a.conn != c {
		a.conn.agent = ""
		a.conn.log.Info("lobby agent moved to another connection", "agent", id)
	}
	l.seq++
	l.agents[id] = &connectedAgent{id: id, caps: caps, conn: c, seq: l.seq}
	c.agent = id
	l.mu.Unlock()
	c.establish()
	l.notifyChange()
}

// authenticate checks m's auth_token against its sender_id and binds c to
// the agent if it is not yet (re-attaching after a reconnect or a relay
// restart). It returns the agent id.
func (l *Lobby) authenticate(c *conn, m *Message) (string, *protocol.Error) {
	if m.AuthToken == "" {
		return "", protocol.Errorf(protocol.CodeUnauthorized, "Authentication failed: %s needs the sender's auth_token (from REGISTER_ACK)", m.MessageType)
	}
	if m.SenderID == "" {
		return "", protocol.Errorf(protocol.CodeUnauthorized, `Authentication failed: "sender_id" is required`)
	}
	ctx, cancel := l.storeCtx(c)
	defer cancel()
	reg, err := l.st.RegistrationByToken(ctx, m.AuthToken)
	switch {
	case errors.Is(err, store.ErrNotFound) || (err == nil && reg.AgentID != m.SenderID):
		return "", protocol.Errorf(protocol.CodeUnauthorized, "Authentication failed: invalid auth_token for sender_id %q", m.SenderID)
	case err != nil:
		c.log.Error("lobby store lookup failed", "err", err)
		return "", protocol.Errorf(protocol.CodeInternalError, "authentication failed: store unavailable")
	}
	l.mu.Lock()
	bound := c.agent
	l.mu.Unlock()
	switch bound {
	case reg.AgentID:
		return reg.AgentID, nil
	case "":
	default:
		return "", protocol.Errorf(protocol.CodeUnauthorized, "this connection serves agent %q; use a connection per agent", bound)
	}
	var caps []protocol.Capability
	if len(reg.Capabilities) > 0 {
		if err := json.Unmarshal(reg.Capabilities, &caps); err != nil {
			c.log.Error("stored capabilities unreadable", "agent", reg.AgentID, "err", err)
			return "", protocol.Errorf(protocol.CodeInternalError, "stored registration of %q is unreadable; REGISTER again", reg.AgentID)
		}
	}
	l.attach(c, reg.AgentID, caps)
	c.log.Info("lobby agent attached", "agent", reg.AgentID)
	return reg.AgentID, nil
}
