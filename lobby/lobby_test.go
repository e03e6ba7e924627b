package lobby_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// lobbyMesh is the fake mesh with a directory: find_cheapest_item_price_v2
// is offered by peerID and by the relay's own node (selfID), which the
// lobby must leave out; "broken" fails.
type lobbyMesh struct{ *fakemesh.Mesh }

func (lobbyMesh) Discover(ctx context.Context, query string, byKeyword bool) (<-chan protocol.PeerInfo, error) {
	if query == "broken" {
		return nil, protocol.Errorf(protocol.CodeInternalError, "directory unavailable")
	}
	var found []protocol.PeerInfo
	if query == "find_cheapest_item_price_v2" && !byKeyword {
		found = []protocol.PeerInfo{
			{AgentID: selfID, Capabilities: []protocol.Capability{{Name: query}}},
			{AgentID: peerID, Capabilities: []protocol.Capability{{Name: query, Description: "mesh price hunter"}}},
		}
	}
	if query == "shopping" && byKeyword { // directory keys are exact: "Shopping" finds nothing
		found = []protocol.PeerInfo{
			{AgentID: selfID, Capabilities: []protocol.Capability{{Name: "lobby_copy", Keywords: []string{"shopping"}}}},
			{AgentID: peerID, Capabilities: []protocol.Capability{{Name: "mesh_basket", Keywords: []string{"shopping"}}}},
		}
	}
	ch := make(chan protocol.PeerInfo)
	go func() {
		defer close(ch)
		for _, pi := range found {
			select {
			case ch <- pi:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

func lobbyStore(t *testing.T, path string) *store.Store {
	t.Helper()
	st, err := store.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// testLobby is a lobby behind an httptest server.
type testLobby struct {
	lobby *lobby.Lobby
	mesh  *fakemesh.Mesh
	url   string
	stop  func() // closes lobby, HTTP server and store; also a cleanup
}

// newTestLobby serves a lobby over a fresh store in t.TempDir().
func newTestLobby(t *testing.T, opts ...lobby.Option) *testLobby {
	t.Helper()
	return lobbyAt(t, filepath.Join(t.TempDir(), "store.db"), opts...)
}

// lobbyAt serves a lobby over the store file at path.
func lobbyAt(t *testing.T, path string, opts ...lobby.Option) *testLobby {
	t.Helper()
	st := lobbyStore(t, path)
	mesh := fakemesh.New()
	l, err := lobby.New(lobbyMesh{mesh}, st, append([]lobby.Option{lobby.WithLogger(testlog.New(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(l)
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		if err := l.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		hs.Close()
		if err := st.Close(); err != nil {
			t.Errorf("store Close: %v", err)
		}
	}
	t.Cleanup(stop)
	return &testLobby{lobby: l, mesh: mesh, url: "ws" + strings.TrimPrefix(hs.URL, "http") + "/lobby", stop: stop}
}

// lobbyClient is a seed 000 agent speaking raw frames.
type lobbyClient struct {
	t     *testing.T
	ws    *websocket.Conn
	id    string
	token string
}

func dialLobby(t *testing.T, url, id string) *lobbyClient {
	t.Helper()
	return &lobbyClient{t: t, ws: dialRaw(t, url), id: id}
}

func (c *lobbyClient) sendRaw(frame string) {
	c.t.Helper()
	writeFrame(c.t, c.ws, frame)
}

// send sends a message from c with its token.
func (c *lobbyClient) send(typ, receiver, conv string, payload any) {
	c.t.Helper()
	p, err := json.Marshal(payload)
	if err != nil {
		c.t.Fatal(err)
	}
	b, err := json.Marshal(lobby.Message{SenderID: c.id, ReceiverID: receiver, MessageType: typ, Payload: p, ConversationID: conv, AuthToken: c.token})
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendRaw(string(b))
}

func (c *lobbyClient) recv() lobby.Message {
	c.t.Helper()
	frame := readFrame(c.t, c.ws)
	var m lobby.Message
	if err := json.Unmarshal([]byte(frame), &m); err != nil {
		c.t.Fatalf("%s received %s: %v", c.id, frame, err)
	}
	return m
}

// expect receives the next message and checks its type.
func (c *lobbyClient) expect(typ string) lobby.Message {
	c.t.Helper()
	m := c.recv()
	if m.MessageType != typ {
		c.t.Fatalf("%s: got %s %s, want %s", c.id, m.MessageType, m.Payload, typ)
	}
	return m
}

// expectError receives an ERROR whose code is code and whose text
// contains want.
func (c *lobbyClient) expectError(code protocol.Code, want string) lobby.ErrorPayload {
	c.t.Helper()
	m := c.expect(lobby.TypeError)
	var p lobby.ErrorPayload
	decodePayload(c.t, m, &p)
	if p.Code != code || !strings.Contains(p.Error, want) {
		c.t.Fatalf("%s: ERROR %+v, want code %s mentioning %q", c.id, p, code, want)
	}
	return p
}

// expectErrorResponse receives a RESPONSE with status "error".
func (c *lobbyClient) expectErrorResponse(code protocol.Code, want string) lobby.Message {
	c.t.Helper()
	m := c.expect(lobby.TypeResponse)
	var p lobby.ErrorResponse
	decodePayload(c.t, m, &p)
	if p.Status != protocol.StatusError || p.Code != code || !strings.Contains(p.Error, want) {
		c.t.Fatalf("%s: RESPONSE %s, want status error, code %s, mentioning %q", c.id, m.Payload, code, want)
	}
	return m
}

// quiet proves nothing else is queued for c: a malformed frame's ERROR
// must be the next message.
func (c *lobbyClient) quiet() {
	c.t.Helper()
	c.sendRaw(`{"message_type":"QUIET?"}`)
	c.expectError(protocol.CodeInvalidMessage, `unknown message_type "QUIET?"`)
}

func decodePayload(t *testing.T, m lobby.Message, v any) {
	t.Helper()
	if err := json.Unmarshal(m.Payload, v); err != nil {
		t.Fatalf("payload %s: %v", m.Payload, err)
	}
}

// register registers c with caps and keeps the token.
func (c *lobbyClient) register(caps ...protocol.Capability) {
	c.t.Helper()
	if caps == nil {
		caps = []protocol.Capability{}
	}
	c.send(lobby.TypeRegister, lobby.DefaultID, "", lobby.RegisterPayload{Capabilities: caps})
	m := c.expect(lobby.TypeRegisterAck)
	var ack lobby.RegisterAckPayload
	decodePayload(c.t, m, &ack)
	if ack.Status != lobby.RegisterStatus || ack.LobbyID != lobby.DefaultID || m.ReceiverID != c.id || m.SenderID != lobby.DefaultID {
		c.t.Fatalf("REGISTER_ACK %+v %s", m, m.Payload)
	}
	c.token = ack.AuthToken
}

func searchCap(authorized ...string) protocol.Capability {
	return protocol.Capability{
		Name:                   "find_cheapest_item_price_v2",
		Description:            "finds the cheapest price",
		InputSchema:            json.RawMessage(`{"type":"object"}`),
		OutputSchema:           json.RawMessage(`{}`),
		AuthorizedRequesterIDs: authorized,
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
