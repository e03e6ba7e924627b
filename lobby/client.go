package lobby

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/protocol"
)

// MaxAskAnswers bounds the answers Client.Ask keeps for one message: a
// lobby that sends more progress than this for one conversation ends the
// Ask with ErrTooManyAnswers instead of growing its slice without end.
const MaxAskAnswers = 1024

// ErrTooManyAnswers is returned by Client.Ask when a conversation's
// answers pass MaxAskAnswers.
var ErrTooManyAnswers = errors.New("lobby: too many answers to one message")

// DefaultClientReadLimit bounds a message a Client reads, in bytes, unless
// WithClientReadLimit says otherwise: a longer one ends the connection.
const DefaultClientReadLimit = 1 << 20

// ErrRegisterRefused is wrapped by the error of Client.Register when the
// lobby answers REGISTER with something other than REGISTER_ACK.
var ErrRegisterRefused = errors.New("lobby: REGISTER refused")

// Client is a seed 000 lobby agent written in Go: one WebSocket connection
// to a lobby, one JSON message per text message (§3), and the auth_token
// of its REGISTER_ACK (§6), sent with every later message. Send and Recv
// may be called from different goroutines; Register and Ask read the
// connection themselves, so they must not run while another goroutine
// calls Recv.
type Client struct {
	id string
	ws *websocket.Conn

	mu    sync.Mutex
	token string
}

// ClientOption configures Dial.
type ClientOption func(*clientConfig)

type clientConfig struct {
	token     string
	readLimit int64
}

// WithClientToken sets the auth_token the client sends, as a client that
// reconnects does with the token of its earlier REGISTER_ACK: its next
// message re-attaches it to its agent_id without a REGISTER.
func WithClientToken(token string) ClientOption {
	return func(c *clientConfig) { c.token = token }
}

// WithClientReadLimit bounds a message the client reads, in bytes
// (default DefaultClientReadLimit); n <= 0 keeps the default.
func WithClientReadLimit(n int64) ClientOption {
	return func(c *clientConfig) {
		if n > 0 {
			c.readLimit = n
		}
	}
}

// Dial connects to the lobby at url (ws:// or wss://, with the path the
// lobby is served at, "/lobby" on a relay) as the agent id. It does not
// register: call Register, or pass WithClientToken to re-attach.
func Dial(ctx context.Context, url, id string, opts ...ClientOption) (*Client, error) {
	cfg := clientConfig{readLimit: DefaultClientReadLimit}
	for _, o := range opts {
		o(&cfg)
	}
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, fmt.Errorf("lobby client %s: %w", id, err)
	}
	ws.SetReadLimit(cfg.readLimit)
	return &Client{id: id, ws: ws, token: cfg.token}, nil
}

// ID returns the client's agent_id.
func (c *Client) ID() string { return c.id }

// Token returns the auth_token the client sends: its REGISTER_ACK's once
// registered.
func (c *Client) Token() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.token
}

// Register sends REGISTER with caps (§4.1) and keeps the auth_token of the
// REGISTER_ACK (§4.2). An ERROR is returned as an error wrapping
// ErrRegisterRefused and the *protocol.Error of its code.
func (c *Client) Register(ctx context.Context, caps ...protocol.Capability) error {
	ms, err := c.Ask(ctx, DefaultID, TypeRegister, "", RegisterPayload{Capabilities: append([]protocol.Capability{}, caps...)}) // [], not null
	if err != nil {
		return err
	}
	m := ms[len(ms)-1]
	if m.MessageType != TypeRegisterAck {
		return fmt.Errorf("lobby client %s: %w: %w", c.id, ErrRegisterRefused, answerError(m))
	}
	var ack RegisterAckPayload
	if err := protocol.DecodeStrict(m.Payload, &ack); err != nil {
		return fmt.Errorf("lobby client %s: REGISTER_ACK: %w", c.id, err)
	}
	c.mu.Lock()
	c.token = ack.AuthToken
	c.mu.Unlock()
	return nil
}

// Discover sends DISCOVER_SERVICES with q (§4.3) and returns the
// payload of the SERVICES_AVAILABLE that answers it (§4.4): the connected
// lobby agents with matching capabilities, then the mesh agents the
// directory finds. An ERROR is returned as its *protocol.Error.
func (c *Client) Discover(ctx context.Context, q DiscoverServicesPayload) (*ServicesAvailablePayload, error) {
	ms, err := c.Ask(ctx, DefaultID, TypeDiscoverServices, protocol.NewID(), q)
	if err != nil {
		return nil, err
	}
	m := ms[len(ms)-1]
	if m.MessageType != TypeServicesAvailable {
		return nil, fmt.Errorf("lobby client %s: DISCOVER_SERVICES: %w", c.id, answerError(m))
	}
	var sa ServicesAvailablePayload
	if err := protocol.DecodeStrict(m.Payload, &sa); err != nil {
		return nil, fmt.Errorf("lobby client %s: SERVICES_AVAILABLE: %w", c.id, err)
	}
	return &sa, nil
}

// answerError is the *protocol.Error of an ERROR message m, or of another
// answer where one was not expected.
func answerError(m *Message) *protocol.Error {
	var e ErrorPayload
	if m.MessageType != TypeError || protocol.DecodeStrict(m.Payload, &e) != nil {
		return protocol.Errorf(protocol.CodeInvalidMessage, "unexpected answer %s %s", m.MessageType, m.Payload)
	}
	return &protocol.Error{Code: e.Code, Message: e.Error}
}

// Send sends a message of type typ to the agent to in conversation conv
// (empty: none), with payload encoded as its JSON payload and the client's
// token.
func (c *Client) Send(ctx context.Context, to, typ, conv string, payload any) error {
	p, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("lobby client %s: payload: %w", c.id, err)
	}
	b, err := json.Marshal(Message{SenderID: c.id, ReceiverID: to, MessageType: typ, Payload: p, ConversationID: conv, AuthToken: c.Token()})
	if err != nil {
		return fmt.Errorf("lobby client %s: %w", c.id, err)
	}
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		return fmt.Errorf("lobby client %s: %w", c.id, err)
	}
	return nil
}

// Recv returns the next message the lobby sends, decoded strictly
// (ParseMessage).
func (c *Client) Recv(ctx context.Context) (*Message, error) {
	_, b, err := c.ws.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("lobby client %s: %w", c.id, err)
	}
	m, err := ParseMessage(b)
	if err != nil {
		return nil, fmt.Errorf("lobby client %s: %w", c.id, err)
	}
	return m, nil
}

// Ask sends a message as Send does and returns the answers of its
// conversation, in order: the RESPONSEs with status "in_progress" (§4.6),
// then the final answer — a RESPONSE with any other status, another type
// (REGISTER_ACK, SERVICES_AVAILABLE), or an ERROR, which the lobby sends
// without a conversation_id when the message had none. It reads the
// connection itself and skips messages of other conversations, so it
// suits an agent that only asks; one that also serves reads with Recv.
// It keeps at most MaxAskAnswers answers. On an error it returns the
// answers read so far.
func (c *Client) Ask(ctx context.Context, to, typ, conv string, payload any) ([]*Message, error) {
	if err := c.Send(ctx, to, typ, conv, payload); err != nil {
		return nil, err
	}
	var ms []*Message
	for {
		m, err := c.Recv(ctx)
		if err != nil {
			return ms, err
		}
		if m.ConversationID != conv && m.MessageType != TypeError {
			continue
		}
		if len(ms) == MaxAskAnswers {
			return ms, fmt.Errorf("lobby client %s: %w (%d)", c.id, ErrTooManyAnswers, MaxAskAnswers)
		}
		ms = append(ms, m)
		var st struct {
			Status string `json:"status"`
		}
		if m.MessageType != TypeResponse || json.Unmarshal(m.Payload, &st) != nil || st.Status != string(protocol.StatusInProgress) {
			return ms, nil
		}
	}
}

// Close ends the connection at once, without a closing handshake; the
// lobby takes the agent out of its directory (its registration stays).
func (c *Client) Close() error {
	return c.ws.CloseNow()
}
