package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"

	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
)

// client is a seed 000 agent: a WebSocket connection to the lobby, one
// JSON message per text message (§3).
type client struct {
	id, token string
	ws        *websocket.Conn
}

// dial connects to the lobby at url as agent id, without registering.
func dial(ctx context.Context, url, id string) (*client, error) {
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", id, err)
	}
	return &client{id: id, ws: ws}, nil
}

// register connects as id and registers caps (§4.1), keeping the token
// of the REGISTER_ACK (§4.2) for every later message (§6).
func register(ctx context.Context, url, id string, caps []protocol.Capability) (*client, error) {
	c, err := dial(ctx, url, id)
	if err != nil {
		return nil, err
	}
	ms, err := c.ask(ctx, lobby.DefaultID, lobby.TypeRegister, "", lobby.RegisterPayload{Capabilities: append([]protocol.Capability{}, caps...)})
	var ack lobby.RegisterAckPayload
	if err == nil && ms[0].MessageType != lobby.TypeRegisterAck {
		err = fmt.Errorf("%s: REGISTER answered %s %s", id, ms[0].MessageType, ms[0].Payload)
	}
	if err == nil {
		err = json.Unmarshal(ms[0].Payload, &ack)
	}
	if err != nil {
		_ = c.ws.CloseNow()
		return nil, err
	}
	c.token = ack.AuthToken
	return c, nil
}

// send writes a message to the agent to.
func (c *client) send(ctx context.Context, to, typ, conv string, payload any) error {
	p, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	return wsjson.Write(ctx, c.ws, lobby.Message{SenderID: c.id, ReceiverID: to, MessageType: typ,
		Payload: p, ConversationID: conv, AuthToken: c.token})
}

// recv reads the next message, decoded strictly.
func (c *client) recv(ctx context.Context) (*lobby.Message, error) {
	_, b, err := c.ws.Read(ctx)
	if err != nil {
		return nil, err
	}
	return lobby.ParseMessage(b)
}

// ask sends a message and returns the answers of its conversation: the
// RESPONSEs in progress, then the last one (or an ERROR, which names no
// conversation when the message had none).
func (c *client) ask(ctx context.Context, to, typ, conv string, payload any) ([]*lobby.Message, error) {
	if err := c.send(ctx, to, typ, conv, payload); err != nil {
		return nil, err
	}
	var ms []*lobby.Message
	for {
		m, err := c.recv(ctx)
		if err != nil {
			return nil, err
		}
		if m.ConversationID != conv && m.MessageType != lobby.TypeError {
			continue
		}
		ms = append(ms, m)
		var st struct{ Status string }
		if json.Unmarshal(m.Payload, &st) != nil || st.Status != string(protocol.StatusInProgress) {
			return ms, nil
		}
	}
}

// serve answers the REQUESTs the hunter c receives until its connection
// ends, printing each: the search with a RESPONSE in progress before the
// final one (§4.6), the price with q.
func (c *client) serve(ctx context.Context, out io.Writer, q quote) {
	for {
		m, err := c.recv(ctx)
		if err != nil {
			return // closed at the end of the flow
		}
		var p struct {
			Capability string `json:"capability_name"`
			Site       string `json:"target_website"`
		}
		if m.MessageType != lobby.TypeRequest || json.Unmarshal(m.Payload, &p) != nil {
			continue
		}
		fmt.Fprintf(out, "%s: REQUEST %s from %s: %s\n", c.id, m.ConversationID, m.SenderID, p.Capability)
		answer := func(v any) { _ = c.send(ctx, m.SenderID, lobby.TypeResponse, m.ConversationID, v) }
		if p.Capability == capSearch {
			answer(map[string]any{"status": "in_progress", "message": "searching " + p.Site})
			answer(map[string]any{"status": "success", "item_found_on_site": map[string]any{"regular_price": 128, "source_website": p.Site},
				"cheapest_price_globally": q, "message": "Search complete."})
		} else {
			answer(map[string]any{"status": "success", "cheapest_price": q.Price, "source": q.Source})
		}
	}
}
