package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
)

// lobbyClient is one seed 000 agent: a WebSocket connection to the lobby,
// one JSON message per text message (§3).
type lobbyClient struct {
	id    string
	token string // from REGISTER_ACK
	ws    *websocket.Conn
}

// dialLobby connects to the lobby at url as agent id. It does not
// register: see register.
func dialLobby(ctx context.Context, url, id string) (*lobbyClient, error) {
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: dial the lobby: %w", id, err)
	}
	ws.SetReadLimit(1 << 20)
	return &lobbyClient{id: id, ws: ws}, nil
}

// close ends the connection with a normal closure.
func (c *lobbyClient) close() {
	_ = c.ws.Close(websocket.StatusNormalClosure, "done")
}

// send writes m, filling sender_id and, unless m names one, the client's
// auth_token.
func (c *lobbyClient) send(ctx context.Context, m lobby.Message) error {
	if m.SenderID == "" {
		m.SenderID = c.id
	}
	if m.AuthToken == "" {
		m.AuthToken = c.token
	}
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("%s: encode %s: %w", c.id, m.MessageType, err)
	}
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("%s: send %s: %w", c.id, m.MessageType, err)
	}
	return nil
}

// recv reads the next message.
func (c *lobbyClient) recv(ctx context.Context) (*lobby.Message, error) {
	_, b, err := c.ws.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: read: %w", c.id, err)
	}
	m, err := lobby.ParseMessage(b)
	if err != nil {
		return nil, fmt.Errorf("%s: parse %s: %w", c.id, b, err)
	}
	return m, nil
}

// register sends REGISTER with caps (§4.1, §5.1) and keeps the token of
// the REGISTER_ACK (§4.2).
func (c *lobbyClient) register(ctx context.Context, caps []protocol.Capability) error {
	if caps == nil {
		caps = []protocol.Capability{}
	}
	payload, err := json.Marshal(lobby.RegisterPayload{Capabilities: caps})
	if err != nil {
		return fmt.Errorf("%s: encode REGISTER: %w", c.id, err)
	}
	if err := c.send(ctx, lobby.Message{ReceiverID: lobby.DefaultID, MessageType: lobby.TypeRegister, Payload: payload}); err != nil {
		return err
	}
	m, err := c.recv(ctx)
	if err != nil {
		return err
	}
	if m.MessageType != lobby.TypeRegisterAck {
		return fmt.Errorf("%s: REGISTER answered with %s: %s", c.id, m.MessageType, m.Payload)
	}
	var ack lobby.RegisterAckPayload
	if err := json.Unmarshal(m.Payload, &ack); err != nil {
		return fmt.Errorf("%s: REGISTER_ACK payload: %w", c.id, err)
	}
	if ack.Status != lobby.RegisterStatus || ack.AuthToken == "" {
		return fmt.Errorf("%s: REGISTER_ACK without a token: %s", c.id, m.Payload)
	}
	c.token = ack.AuthToken
	return nil
}

// discover sends DISCOVER_SERVICES for capability (§4.3, §5.2) and
// returns the SERVICES_AVAILABLE payload, or the ERROR payload as an
// error.
func (c *lobbyClient) discover(ctx context.Context, capability, conv string) (*lobby.ServicesAvailablePayload, error) {
	payload, err := json.Marshal(lobby.DiscoverServicesPayload{CapabilityName: capability})
	if err != nil {
		return nil, fmt.Errorf("%s: encode DISCOVER_SERVICES: %w", c.id, err)
	}
	if err := c.send(ctx, lobby.Message{ReceiverID: lobby.DefaultID, MessageType: lobby.TypeDiscoverServices,
		Payload: payload, ConversationID: conv}); err != nil {
		return nil, err
	}
	m, err := c.next(ctx, conv)
	if err != nil {
		return nil, err
	}
	switch m.MessageType {
	case lobby.TypeServicesAvailable:
		var sa lobby.ServicesAvailablePayload
		if err := json.Unmarshal(m.Payload, &sa); err != nil {
			return nil, fmt.Errorf("%s: SERVICES_AVAILABLE payload: %w", c.id, err)
		}
		return &sa, nil
	case lobby.TypeError:
		return nil, lobbyError(m)
	default:
		return nil, fmt.Errorf("%s: DISCOVER_SERVICES answered with %s", c.id, m.MessageType)
	}
}

// response is a RESPONSE (§4.6) as the requester receives it.
type response struct {
	from    string          // sender_id: the provider, or the lobby when it refused
	status  string          // "success", "error", …
	payload json.RawMessage // the whole payload
}

// request sends REQUEST for capability to the agent to, with params'
// members after capability_name (§4.5, §5.3), and waits for the final
// RESPONSE of conversation conv; each in_progress RESPONSE goes to
// progress (may be nil). An ERROR is returned as an error.
func (c *lobbyClient) request(ctx context.Context, to, capability, conv string, params map[string]any, progress func(json.RawMessage)) (*response, error) {
	p := map[string]any{"capability_name": capability}
	for k, v := range params {
		p[k] = v
	}
	payload, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("%s: encode REQUEST: %w", c.id, err)
	}
	if err := c.send(ctx, lobby.Message{ReceiverID: to, MessageType: lobby.TypeRequest, Payload: payload, ConversationID: conv}); err != nil {
		return nil, err
	}
	for {
		m, err := c.next(ctx, conv)
		if err != nil {
			return nil, err
		}
		if m.MessageType == lobby.TypeError {
			return nil, lobbyError(m)
		}
		if m.MessageType != lobby.TypeResponse {
			return nil, fmt.Errorf("%s: REQUEST answered with %s", c.id, m.MessageType)
		}
		var st struct {
			Status string `json:"status"`
		}
		if err := json.Unmarshal(m.Payload, &st); err != nil {
			return nil, fmt.Errorf("%s: RESPONSE payload: %w", c.id, err)
		}
		if st.Status == string(protocol.StatusInProgress) {
			if progress != nil {
				progress(m.Payload)
			}
			continue
		}
		return &response{from: m.SenderID, status: st.Status, payload: m.Payload}, nil
	}
}

// next reads until the message of conversation conv (an ERROR for a
// message without conversation_id echoes none, so an ERROR is always
// taken).
func (c *lobbyClient) next(ctx context.Context, conv string) (*lobby.Message, error) {
	for {
		m, err := c.recv(ctx)
		if err != nil {
			return nil, err
		}
		if m.ConversationID == conv || m.MessageType == lobby.TypeError {
			return m, nil
		}
	}
}

// lobbyErr is an ERROR message (§4.7) received by a client.
type lobbyErr struct{ lobby.ErrorPayload }

func (e *lobbyErr) Error() string {
	return fmt.Sprintf("ERROR %s: %s", e.Code, e.ErrorPayload.Error)
}

func lobbyError(m *lobby.Message) error {
	var p lobby.ErrorPayload
	if err := json.Unmarshal(m.Payload, &p); err != nil {
		return fmt.Errorf("ERROR with a bad payload %s: %w", m.Payload, err)
	}
	return &lobbyErr{p}
}
