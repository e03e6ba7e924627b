package lobby_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// lobbyMesh is the fake mesh with a directory: find_cheapest_item_price_v2
// is offered by peerID and by the relay's own node (selfID), which the
// lobby must leave out; "broken" fails.
type lobbyMesh struct{ *fakeMesh }

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
	mesh  *fakeMesh
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
	mesh := newFakeMesh()
	l, err := lobby.New(lobbyMesh{mesh}, st, append([]lobby.Option{lobby.WithLogger(testLogger(t))}, opts...)...)
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

func TestRegister(t *testing.T) {
	tl := newTestLobby(t)
	a := dialLobby(t, tl.url, "price_hunter_A2_v2")
	a.register(searchCap())
	if len(a.token) < 43 {
		t.Errorf("token %q: want at least 256 bits", a.token)
	}
	b := dialLobby(t, tl.url, "shopper_B1")
	b.register()
	if a.token == b.token {
		t.Fatal("two agents got the same token")
	}
	if got := tl.lobby.Capabilities(); len(got) != 1 || got[0].Name != "find_cheapest_item_price_v2" {
		t.Fatalf("Capabilities %+v", got)
	}

	// The id is taken: without its token nobody registers it again.
	c := dialLobby(t, tl.url, "price_hunter_A2_v2")
	c.send(lobby.TypeRegister, lobby.DefaultID, "", lobby.RegisterPayload{})
	c.expectError(protocol.CodeUnauthorized, "already registered")
	c.token = b.token
	c.send(lobby.TypeRegister, lobby.DefaultID, "", lobby.RegisterPayload{})
	c.expectError(protocol.CodeUnauthorized, "invalid auth_token")

	// With it, the agent re-registers: new capabilities, new token, the
	// old token dead.
	old := a.token
	a.register(protocol.Capability{Name: "initiate_item_search_v2"})
	if a.token == old {
		t.Fatal("re-registering kept the token")
	}
	if got := tl.lobby.Capabilities(); len(got) != 1 || got[0].Name != "initiate_item_search_v2" {
		t.Fatalf("Capabilities after re-registering %+v", got)
	}
	a.token = old
	a.send(lobby.TypeDiscoverServices, lobby.DefaultID, "", lobby.DiscoverServicesPayload{CapabilityName: "x"})
	a.expectError(protocol.CodeUnauthorized, "Authentication failed")

	for _, tc := range []struct{ id, payload, want string }{
		{"", `{"capabilities":[]}`, `needs "sender_id"`},
		{"global_lobby", `{}`, "lobby's own id"},
		{peerID, `{}`, "mesh agent id"},
		{peerB64, `{}`, "mesh agent id"},
		{"two words", `{}`, "whitespace"},
		{"x", `{"capabilities":{}}`, "must be an array"},
		{"x", `{"capabilities":[{"description":"no name"}]}`, "name is required"},
		{"x", `{"capabilities":[{"name":"a"},{"name":"a"}]}`, "listed twice"},
		{"x", `{"capabilities":[{"name":"a","input_schema":3}]}`, "JSON Schema"},
	} {
		d := dialLobby(t, tl.url, tc.id)
		d.sendRaw(`{"sender_id":` + strconvQuote(tc.id) + `,"receiver_id":"global_lobby","message_type":"REGISTER","payload":` + tc.payload + `,"auth_token":null}`)
		d.expectError(protocol.CodeInvalidMessage, tc.want)
	}
}

func strconvQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestTokenStoredHashed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	tl := lobbyAt(t, path)
	a := dialLobby(t, tl.url, "agent_a")
	a.register(searchCap())
	_ = a.ws.CloseNow()
	tl.stop()
	st := lobbyStore(t, path)
	defer st.Close()
	regs, err := st.Registrations(ctxT(t))
	if err != nil || len(regs) != 1 || regs[0].AgentID != "agent_a" || regs[0].Token != "" {
		t.Fatalf("registrations %+v %v", regs, err)
	}
	var caps []protocol.Capability
	if err := json.Unmarshal(regs[0].Capabilities, &caps); err != nil || len(caps) != 1 || caps[0].Name != "find_cheapest_item_price_v2" {
		t.Fatalf("stored capabilities %s %v", regs[0].Capabilities, err)
	}
	if r, err := st.RegistrationByToken(ctxT(t), a.token); err != nil || r.AgentID != "agent_a" {
		t.Fatalf("token lookup %+v %v", r, err)
	}
}

func TestDiscover(t *testing.T) {
	tl := newTestLobby(t)
	hunter := dialLobby(t, tl.url, "price_hunter_A2_v2")
	hunter.register(searchCap(), protocol.Capability{Name: "initiate_item_search_v2"})
	other := dialLobby(t, tl.url, "another_hunter")
	other.register(searchCap())
	shopper := dialLobby(t, tl.url, "shopper_B1")
	shopper.register(searchCap()) // offers it too, but is never told about itself

	shopper.send(lobby.TypeDiscoverServices, lobby.DefaultID, "conv-d", lobby.DiscoverServicesPayload{CapabilityName: "find_cheapest_item_price_v2"})
	m := shopper.expect(lobby.TypeServicesAvailable)
	if m.ConversationID != "conv-d" || m.ReceiverID != "shopper_B1" || m.SenderID != lobby.DefaultID {
		t.Errorf("envelope %+v", m)
	}
	var sa lobby.ServicesAvailablePayload
	decodePayload(t, m, &sa)
	var ids []string
	for _, s := range sa.ServicesFound {
		ids = append(ids, s.AgentID)
		if len(s.RelevantCapabilities) != 1 || s.RelevantCapabilities[0].Name != "find_cheapest_item_price_v2" {
			t.Errorf("%s: relevant capabilities %+v", s.AgentID, s.RelevantCapabilities)
		}
	}
	// Lobby agents sorted, then the mesh; not the requester, not the relay's own node.
	if want := []string{"another_hunter", "price_hunter_A2_v2", peerID}; !slices.Equal(ids, want) || sa.DiscoveredForCapability != "find_cheapest_item_price_v2" {
		t.Fatalf("found %v for %q, want %v", ids, sa.DiscoveredForCapability, want)
	}

	shopper.send(lobby.TypeDiscoverServices, lobby.DefaultID, "", lobby.DiscoverServicesPayload{CapabilityName: "nothing_offers_this"})
	decodePayload(t, shopper.expect(lobby.TypeServicesAvailable), &sa)
	if sa.ServicesFound == nil || len(sa.ServicesFound) != 0 {
		t.Fatalf("no providers must be an empty list: %+v", sa)
	}
	// A directory failure still answers with the lobby's agents.
	shopper.send(lobby.TypeDiscoverServices, lobby.DefaultID, "", lobby.DiscoverServicesPayload{CapabilityName: "broken"})
	decodePayload(t, shopper.expect(lobby.TypeServicesAvailable), &sa)
	if len(sa.ServicesFound) != 0 {
		t.Fatalf("broken directory: %+v", sa)
	}
	shopper.send(lobby.TypeDiscoverServices, lobby.DefaultID, "", map[string]any{})
	shopper.expectError(protocol.CodeInvalidMessage, `needs "capability_name"`)

	// A detached agent leaves the directory.
	_ = other.ws.Close(websocket.StatusNormalClosure, "")
	waitFor(t, "another_hunter to detach", func() bool {
		shopper.send(lobby.TypeDiscoverServices, lobby.DefaultID, "", lobby.DiscoverServicesPayload{CapabilityName: "find_cheapest_item_price_v2"})
		decodePayload(t, shopper.expect(lobby.TypeServicesAvailable), &sa)
		return len(sa.ServicesFound) == 2
	})
}

func TestRequestBetweenLobbyAgents(t *testing.T) {
	tl := newTestLobby(t)
	hunter := dialLobby(t, tl.url, "price_hunter_A2_v2")
	hunter.register(protocol.Capability{Name: "initiate_item_search_v2"})
	shopper := dialLobby(t, tl.url, "shopper_B1")
	shopper.register()

	shopper.send(lobby.TypeRequest, "price_hunter_A2_v2", "conv-1", map[string]any{
		"capability_name": "initiate_item_search_v2", "item_to_find": "Bose QuietComfort headphones", "target_website": "amazon.com",
	})
	req := hunter.expect(lobby.TypeRequest)
	if req.SenderID != "shopper_B1" || req.ReceiverID != "price_hunter_A2_v2" || req.ConversationID != "conv-1" || req.AuthToken != "" {
		t.Fatalf("forwarded REQUEST %+v (the requester's token must not be forwarded)", req)
	}
	if got := compact(string(req.Payload)); got != `{"capability_name":"initiate_item_search_v2","item_to_find":"Bose QuietComfort headphones","target_website":"amazon.com"}` {
		t.Fatalf("forwarded payload %s", got)
	}
	hunter.send(lobby.TypeResponse, "shopper_B1", "conv-1", map[string]any{"status": "in_progress", "message": "searching"})
	hunter.send(lobby.TypeResponse, "shopper_B1", "conv-1", map[string]any{"status": "success", "message": "Search complete."})
	for _, want := range []string{`{"message":"searching","status":"in_progress"}`, `{"message":"Search complete.","status":"success"}`} {
		m := shopper.expect(lobby.TypeResponse)
		if m.SenderID != "price_hunter_A2_v2" || m.ReceiverID != "shopper_B1" || m.ConversationID != "conv-1" || m.AuthToken != "" || compact(string(m.Payload)) != want {
			t.Fatalf("RESPONSE %+v %s, want %s", m, m.Payload, want)
		}
	}
	// The conversation is over: a late RESPONSE is refused, not delivered.
	hunter.send(lobby.TypeResponse, "shopper_B1", "conv-1", map[string]any{"status": "success"})
	hunter.expectError(protocol.CodeInvalidMessage, "no REQUEST")
	// So is an unsolicited one.
	shopper.send(lobby.TypeResponse, "price_hunter_A2_v2", "conv-x", map[string]any{"status": "success"})
	shopper.expectError(protocol.CodeInvalidMessage, "no REQUEST")

	// Without a conversation_id the lobby assigns one.
	shopper.send(lobby.TypeRequest, "price_hunter_A2_v2", "", map[string]any{"capability_name": "initiate_item_search_v2"})
	req = hunter.expect(lobby.TypeRequest)
	if req.ConversationID == "" {
		t.Fatal("no conversation_id assigned")
	}
	// An agent's ERROR ends the request as a RESPONSE with status error.
	hunter.send(lobby.TypeError, "shopper_B1", req.ConversationID, map[string]any{"error": "out of stock"})
	if m := shopper.expectErrorResponse(protocol.CodeInternalError, "out of stock"); m.ConversationID != req.ConversationID {
		t.Fatalf("conversation %q, want %q", m.ConversationID, req.ConversationID)
	}

	// Refusals come back as RESPONSEs with status error (seed §5.3, §8).
	for _, tc := range []struct {
		receiver, capability string
		code                 protocol.Code
		want                 string
	}{
		{"price_hunter_A2_v2", "no_such_capability", protocol.CodeCapabilityNotSupported, "does not offer"},
		{"nobody_here", "initiate_item_search_v2", protocol.CodeUnknownAgent, "not a mesh agent id"},
		{lobby.DefaultID, "initiate_item_search_v2", protocol.CodeCapabilityNotSupported, "offers no capabilities"},
	} {
		shopper.send(lobby.TypeRequest, tc.receiver, "conv-r", map[string]any{"capability_name": tc.capability})
		if m := shopper.expectErrorResponse(tc.code, tc.want); m.ConversationID != "conv-r" || m.SenderID != lobby.DefaultID {
			t.Fatalf("%+v", m)
		}
	}
	shopper.send(lobby.TypeRequest, "price_hunter_A2_v2", "", map[string]any{"item": 1})
	shopper.expectError(protocol.CodeInvalidMessage, `needs "capability_name"`)
	shopper.send(lobby.TypeRequest, "", "", map[string]any{"capability_name": "x"})
	shopper.expectError(protocol.CodeInvalidMessage, `needs "receiver_id"`)
	hunter.quiet()
	shopper.quiet()
}

func TestRequestTimeout(t *testing.T) {
	tl := newTestLobby(t, lobby.WithRequestTimeout(200*time.Millisecond))
	hunter := dialLobby(t, tl.url, "slow_hunter")
	hunter.register(protocol.Capability{Name: "ponder"})
	shopper := dialLobby(t, tl.url, "shopper_B1")
	shopper.register()
	shopper.send(lobby.TypeRequest, "slow_hunter", "c1", map[string]any{"capability_name": "ponder"})
	hunter.expect(lobby.TypeRequest)
	shopper.expectErrorResponse(protocol.CodeTimeout, "did not answer in time")
	hunter.send(lobby.TypeResponse, "shopper_B1", "c1", map[string]any{"status": "success"})
	hunter.expectError(protocol.CodeInvalidMessage, "no REQUEST")
	shopper.quiet()
}

func TestRequestMeshAgent(t *testing.T) {
	tl := newTestLobby(t)
	shopper := dialLobby(t, tl.url, "shopper_B1")
	shopper.register()

	for _, to := range []string{peerID, peerB64} {
		shopper.send(lobby.TypeRequest, to, "m1", map[string]any{"capability_name": "echo", "item_to_find": "headphones"})
		m := shopper.expect(lobby.TypeResponse)
		want := `{"status":"success","action":"echo","params":{"item_to_find":"headphones"},"timeoutMs":30000,"to":"` + peerID + `"}`
		if m.SenderID != to || m.ConversationID != "m1" || compact(string(m.Payload)) != want {
			t.Fatalf("RESPONSE %+v %s, want %s", m, m.Payload, want)
		}
	}
	// Progress, then the result; a result that is not an object goes under "result".
	shopper.send(lobby.TypeRequest, peerID, "m2", map[string]any{"capability_name": "steps", "n": 2})
	for _, want := range []string{`{"status":"in_progress","step":1}`, `{"status":"in_progress","step":2}`, `{"status":"success","done":true}`} {
		if m := shopper.expect(lobby.TypeResponse); compact(string(m.Payload)) != want {
			t.Fatalf("got %s, want %s", m.Payload, want)
		}
	}
	// A protocol error from the mesh is a RESPONSE with status error and its code.
	shopper.send(lobby.TypeRequest, peerID, "m3", map[string]any{"capability_name": "fail", "code": "UNAUTHORIZED", "message": "not you", "details": map[string]any{"why": "acl"}})
	m := shopper.expectErrorResponse(protocol.CodeUnauthorized, "not you")
	var p lobby.ErrorResponse
	decodePayload(t, m, &p)
	if compact(string(p.Details)) != `{"why":"acl"}` || m.SenderID != peerID {
		t.Fatalf("details %s sender %s", p.Details, m.SenderID)
	}
	shopper.send(lobby.TypeRequest, peerID, "m4", map[string]any{"capability_name": "deadline"})
	shopper.expectErrorResponse(protocol.CodeTimeout, "deadline")
	shopper.send(lobby.TypeRequest, peerID, "m5", map[string]any{"capability_name": "panic"})
	shopper.expectErrorResponse(protocol.CodeInternalError, "internal error")
	shopper.send(lobby.TypeRequest, peerID, "m6", map[string]any{"capability_name": "unknown_cap"})
	shopper.expectErrorResponse(protocol.CodeCapabilityNotSupported, "does not offer")
	shopper.quiet()
}

func TestUnauthorizedRequester(t *testing.T) {
	tl := newTestLobby(t)
	hunter := dialLobby(t, tl.url, "price_hunter_A2_v2")
	hunter.register(searchCap("shopper_B1"))
	rogue := dialLobby(t, tl.url, "rogue_007")
	rogue.register()
	shopper := dialLobby(t, tl.url, "shopper_B1")
	shopper.register()

	rogue.send(lobby.TypeRequest, "price_hunter_A2_v2", "r1", map[string]any{"capability_name": "find_cheapest_item_price_v2", "item_name": "x"})
	m := rogue.expectErrorResponse(protocol.CodeUnauthorized, "Unauthorized: Agent 'rogue_007' is not authorized to call capability 'find_cheapest_item_price_v2' on agent 'price_hunter_A2_v2'.")
	if m.ConversationID != "r1" {
		t.Fatalf("conversation %q", m.ConversationID)
	}
	// The provider never saw it: the next thing it receives is the
	// authorized shopper's request.
	shopper.send(lobby.TypeRequest, "price_hunter_A2_v2", "s1", map[string]any{"capability_name": "find_cheapest_item_price_v2"})
	if req := hunter.expect(lobby.TypeRequest); req.SenderID != "shopper_B1" || req.ConversationID != "s1" {
		t.Fatalf("provider received %+v", req)
	}
	hunter.quiet()
	rogue.quiet()
}

func TestAuthentication(t *testing.T) {
	tl := newTestLobby(t)
	a := dialLobby(t, tl.url, "agent_a")
	a.register()
	b := dialLobby(t, tl.url, "agent_b")
	b.register()
	discover := `"message_type":"DISCOVER_SERVICES","receiver_id":"global_lobby","payload":{"capability_name":"x"},"conversation_id":"c9"`
	for _, tc := range []struct{ frame, want string }{
		{`{"sender_id":"agent_a",` + discover + `}`, "needs the sender's auth_token"},
		{`{"sender_id":"agent_a",` + discover + `,"auth_token":null}`, "needs the sender's auth_token"},
		{`{"sender_id":"agent_a",` + discover + `,"auth_token":"forged"}`, "invalid auth_token"},
		{`{"sender_id":"agent_a",` + discover + `,"auth_token":"` + b.token + `"}`, "invalid auth_token"},
		{`{` + discover + `,"auth_token":"` + a.token + `"}`, `"sender_id" is required`},
		{`{"sender_id":"agent_a","receiver_id":"agent_b","message_type":"REQUEST","payload":{"capability_name":"x"},"auth_token":"nope"}`, "invalid auth_token"},
	} {
		a.sendRaw(tc.frame)
		p := a.expectError(protocol.CodeUnauthorized, tc.want)
		if !strings.Contains(tc.frame, `"conversation_id":"c9"`) {
			continue
		}
		if p.OriginalMessageType != lobby.TypeDiscoverServices || p.OriginalConversationID != "c9" {
			t.Errorf("ERROR payload %+v", p)
		}
	}
	// One connection serves one agent.
	a.token, a.id = b.token, "agent_b"
	a.send(lobby.TypeDiscoverServices, lobby.DefaultID, "", lobby.DiscoverServicesPayload{CapabilityName: "x"})
	a.expectError(protocol.CodeUnauthorized, `serves agent "agent_a"`)
	// An ERROR is never answered, not even a forged one.
	a.sendRaw(`{"sender_id":"agent_a","receiver_id":"agent_b","message_type":"ERROR","payload":{"error":"x"},"auth_token":"forged"}`)
	a.quiet()
}

func TestMalformedMessages(t *testing.T) {
	tl := newTestLobby(t)
	a := dialLobby(t, tl.url, "agent_a")
	for _, tc := range []struct{ frame, want string }{
		{`not json`, "not JSON"},
		{"\xff\xfe", "UTF-8"},
		{`[1,2]`, "not a JSON object"},
		{`{"message_type":"REGISTER"} {}`, "not JSON"},
		{`{"sender_id":"a","sender_id":"b","message_type":"REGISTER"}`, `duplicate member "sender_id"`},
		{`{"sender_id":"agent_a","message_type":"REGISTER","payload":{"capabilities":[],"capabilities":[{"name":"x"}]}}`, `payload: duplicate member "capabilities"`},
		{`{"sender_id":"agent_a"}`, `"message_type" is required`},
		{`{"Message_Type":"REGISTER","sender_id":"agent_a"}`, `"message_type" is required`},
		{`{"sender_id":5,"message_type":"REGISTER"}`, `"sender_id" must be a string`},
		{`{"sender_id":"agent_a","message_type":"REGISTER","payload":[]}`, `"payload" must be an object`},
		{`{"sender_id":"` + strings.Repeat("x", 300) + `","message_type":"REGISTER"}`, "longer than 256"},
		{`{"sender_id":"agent_a","message_type":"HELLO"}`, `unknown message_type "HELLO"`},
		{`{"sender_id":"agent_a","message_type":"REGISTER_ACK"}`, "sent by the lobby"},
		{`{"sender_id":"agent_a","message_type":"SERVICES_AVAILABLE"}`, "sent by the lobby"},
	} {
		a.sendRaw(tc.frame)
		a.expectError(protocol.CodeInvalidMessage, tc.want)
	}
	// A malformed ERROR is dropped, not answered.
	a.sendRaw(`{"message_type":"ERROR","payload":7}`)
	// Unknown top-level members are tolerated (and dropped); the
	// connection still works.
	a.sendRaw(`{"sender_id":"agent_a","receiver_id":"global_lobby","message_type":"REGISTER","payload":{"capabilities":[]},"auth_token":null,"timestamp":"2025-02-14T12:00:00Z"}`)
	a.expect(lobby.TypeRegisterAck)
	a.quiet()
}

func TestRestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	tl := lobbyAt(t, path)
	hunter := dialLobby(t, tl.url, "price_hunter_A2_v2")
	hunter.register(searchCap("shopper_B1"))
	shopper := dialLobby(t, tl.url, "shopper_B1")
	shopper.register()
	_, _ = hunter.ws.CloseNow(), shopper.ws.CloseNow()
	tl.stop()

	tl = lobbyAt(t, path)
	if got := tl.lobby.Capabilities(); len(got) != 0 {
		t.Fatalf("nobody is attached yet, Capabilities %+v", got)
	}
	hunter2 := dialLobby(t, tl.url, "price_hunter_A2_v2")
	hunter2.token = hunter.token
	shopper2 := dialLobby(t, tl.url, "shopper_B1")
	shopper2.token = shopper.token

	// Before the hunter re-attaches it is registered but not connected.
	shopper2.send(lobby.TypeRequest, "price_hunter_A2_v2", "q0", map[string]any{"capability_name": "find_cheapest_item_price_v2"})
	shopper2.expectErrorResponse(protocol.CodeUnknownAgent, "registered but not connected")

	// Any message with the old token re-attaches, with the stored
	// capabilities and ACL.
	hunter2.send(lobby.TypeDiscoverServices, lobby.DefaultID, "", lobby.DiscoverServicesPayload{CapabilityName: "nothing"})
	hunter2.expect(lobby.TypeServicesAvailable)
	if got := tl.lobby.Capabilities(); len(got) != 1 || !slices.Equal(got[0].AuthorizedRequesterIDs, []string{"shopper_B1"}) {
		t.Fatalf("Capabilities after re-attaching %+v", got)
	}
	shopper2.send(lobby.TypeRequest, "price_hunter_A2_v2", "q1", map[string]any{"capability_name": "find_cheapest_item_price_v2"})
	hunter2.expect(lobby.TypeRequest)
	hunter2.send(lobby.TypeResponse, "shopper_B1", "q1", map[string]any{"status": "success", "cheapest_price": 108.8})
	if m := shopper2.expect(lobby.TypeResponse); compact(string(m.Payload)) != `{"cheapest_price":108.8,"status":"success"}` {
		t.Fatalf("RESPONSE %s", m.Payload)
	}
}

func TestReattachTakesOver(t *testing.T) {
	tl := newTestLobby(t)
	old := dialLobby(t, tl.url, "hunter")
	old.register(protocol.Capability{Name: "search"})
	fresh := dialLobby(t, tl.url, "hunter")
	fresh.token = old.token
	fresh.send(lobby.TypeDiscoverServices, lobby.DefaultID, "", lobby.DiscoverServicesPayload{CapabilityName: "search"})
	fresh.expect(lobby.TypeServicesAvailable)
	shopper := dialLobby(t, tl.url, "shopper")
	shopper.register()
	shopper.send(lobby.TypeRequest, "hunter", "t1", map[string]any{"capability_name": "search"})
	fresh.expect(lobby.TypeRequest)
	old.quiet() // the old connection got nothing
	// The old connection closing does not take the agent away.
	_ = old.ws.Close(websocket.StatusNormalClosure, "")
	fresh.send(lobby.TypeResponse, "shopper", "t1", map[string]any{"status": "success"})
	shopper.expect(lobby.TypeResponse)
	if got := tl.lobby.Capabilities(); len(got) != 1 {
		t.Fatalf("Capabilities %+v", got)
	}
}

func TestServe(t *testing.T) {
	tl := newTestLobby(t)
	hunter := dialLobby(t, tl.url, "price_hunter_A2_v2")
	// peerB64 is peerID's other form: the ACL matches either.
	hunter.register(searchCap(peerB64), protocol.Capability{Name: "initiate_item_search_v2"})

	type result struct {
		res json.RawMessage
		err error
	}
	serve := func(ctx context.Context, requester, capability, params string) <-chan result {
		ch := make(chan result, 1)
		go func() {
			res, err := tl.lobby.Serve(ctx, requester, capability, json.RawMessage(params))
			ch <- result{res, err}
		}()
		return ch
	}
	ch := serve(ctxT(t), peerID, "find_cheapest_item_price_v2", `{"item_name":"Best Ever Laptop X1000","capability_name":"ignored"}`)
	req := hunter.expect(lobby.TypeRequest)
	if req.SenderID != peerID || req.ReceiverID != "price_hunter_A2_v2" || req.ConversationID == "" ||
		compact(string(req.Payload)) != `{"capability_name":"find_cheapest_item_price_v2","item_name":"Best Ever Laptop X1000"}` {
		t.Fatalf("REQUEST %+v %s", req, req.Payload)
	}
	hunter.send(lobby.TypeResponse, peerID, req.ConversationID, map[string]any{"status": "in_progress"})
	hunter.send(lobby.TypeResponse, peerID, req.ConversationID, map[string]any{"status": "success", "cheapest_price": 108.8})
	r := receive(t, ch, "Serve")
	if r.err != nil || compact(string(r.res)) != `{"cheapest_price":108.8}` {
		t.Fatalf("Serve: %s %v", r.res, r.err)
	}

	// An error RESPONSE keeps its code.
	ch = serve(ctxT(t), selfID, "initiate_item_search_v2", ``)
	req = hunter.expect(lobby.TypeRequest)
	hunter.send(lobby.TypeResponse, selfID, req.ConversationID, map[string]any{"status": "error", "error": "site down", "code": "RATE_LIMITED"})
	r = receive(t, ch, "Serve")
	if pe := protocol.AsError(r.err); pe == nil || pe.Code != protocol.CodeRateLimited || pe.Message != "site down" {
		t.Fatalf("Serve error %v", r.err)
	}

	// ctx's deadline is a TIMEOUT.
	ctx, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
	defer cancel()
	ch = serve(ctx, selfID, "initiate_item_search_v2", `{}`)
	hunter.expect(lobby.TypeRequest)
	if r := receive(t, ch, "Serve"); protocol.CodeOf(r.err) != protocol.CodeTimeout {
		t.Fatalf("Serve past its deadline: %v", r.err)
	}

	// Refusals: the provider never sees them.
	for _, tc := range []struct {
		requester, capability, params string
		code                          protocol.Code
	}{
		{selfID, "find_cheapest_item_price_v2", `{}`, protocol.CodeUnauthorized},
		{"rogue_007", "find_cheapest_item_price_v2", `{}`, protocol.CodeUnauthorized},
		{peerID, "nobody_offers", `{}`, protocol.CodeCapabilityNotSupported},
		{peerID, "initiate_item_search_v2", `[1]`, protocol.CodeInvalidMessage},
		{peerID, "initiate_item_search_v2", `{"a":1,"a":2}`, protocol.CodeInvalidMessage},
		{"", "initiate_item_search_v2", `{}`, protocol.CodeInvalidMessage},
	} {
		_, err := tl.lobby.Serve(ctxT(t), tc.requester, tc.capability, json.RawMessage(tc.params))
		if protocol.CodeOf(err) != tc.code {
			t.Errorf("Serve(%s, %s, %s): %v, want %s", tc.requester, tc.capability, tc.params, err, tc.code)
		}
	}
	hunter.quiet()

	// A provider that disconnects ends the call.
	ch = serve(ctxT(t), selfID, "initiate_item_search_v2", `{}`)
	hunter.expect(lobby.TypeRequest)
	_ = hunter.ws.Close(websocket.StatusNormalClosure, "")
	if r := receive(t, ch, "Serve"); protocol.CodeOf(r.err) != protocol.CodeInternalError {
		t.Fatalf("Serve after the provider left: %v", r.err)
	}
}

func TestServePicksLatestAgent(t *testing.T) {
	tl := newTestLobby(t)
	first := dialLobby(t, tl.url, "first")
	first.register(protocol.Capability{Name: "search", Description: "first"})
	second := dialLobby(t, tl.url, "second")
	second.register(protocol.Capability{Name: "search", Description: "second"})
	if got := tl.lobby.Capabilities(); len(got) != 1 || got[0].Description != "second" {
		t.Fatalf("Capabilities %+v", got)
	}
	done := make(chan error, 1)
	go func() {
		_, err := tl.lobby.Serve(ctxT(t), peerID, "search", nil)
		done <- err
	}()
	req := second.expect(lobby.TypeRequest)
	second.send(lobby.TypeResponse, peerID, req.ConversationID, map[string]any{"status": "success"})
	if err := receive(t, done, "Serve"); err != nil {
		t.Fatal(err)
	}
	first.quiet()
	// When the latest leaves, the earlier one serves again.
	_ = second.ws.Close(websocket.StatusNormalClosure, "")
	waitFor(t, "first to serve search", func() bool {
		got := tl.lobby.Capabilities()
		return len(got) == 1 && got[0].Description == "first"
	})
}

func TestOnChange(t *testing.T) {
	tl := newTestLobby(t)
	changes := make(chan []protocol.Capability, 16)
	tl.lobby.OnChange(func() { changes <- tl.lobby.Capabilities() })
	names := func(caps []protocol.Capability) string {
		var out []string
		for _, c := range caps {
			out = append(out, c.Name)
		}
		return strings.Join(out, ",")
	}
	next := func(want string) {
		t.Helper()
		for {
			got := names(receive(t, changes, "OnChange for "+want))
			if got == want {
				return
			}
		}
	}
	a := dialLobby(t, tl.url, "agent_a")
	a.register(protocol.Capability{Name: "alpha"})
	next("alpha")
	b := dialLobby(t, tl.url, "agent_b")
	b.register(protocol.Capability{Name: "beta"})
	next("alpha,beta")
	// An agent with no capabilities changes nothing.
	c := dialLobby(t, tl.url, "agent_c")
	c.register()
	_ = c.ws.Close(websocket.StatusNormalClosure, "")
	_ = a.ws.Close(websocket.StatusNormalClosure, "")
	next("beta")
	_ = b.ws.Close(websocket.StatusNormalClosure, "")
	next("")
	select {
	case got := <-changes:
		t.Fatalf("an extra OnChange: %v", names(got))
	default:
	}
}

func TestSlowConsumer(t *testing.T) {
	limits := lobby.DefaultLimits()
	limits.SendQueue, limits.WriteTimeout, limits.MaxConcurrentCalls = 128, 300*time.Millisecond, 128
	tl := newTestLobby(t, lobby.WithLimits(limits))
	// A provider that never reads again after registering.
	stuck := dialLobby(t, tl.url, "stuck")
	stuck.register(protocol.Capability{Name: "sink"})
	flooder := dialLobby(t, tl.url, "flooder")
	flooder.register()
	other := dialLobby(t, tl.url, "other")
	other.register(protocol.Capability{Name: "fine"})

	// The flooder reads all the time, so that only the stuck agent is slow.
	types := make(chan string, 256)
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		for {
			_, b, err := flooder.ws.Read(context.Background())
			if err != nil {
				return
			}
			var m lobby.Message
			_ = json.Unmarshal(b, &m)
			types <- m.MessageType
		}
	}()
	sinkOffered := func() bool {
		return slices.ContainsFunc(tl.lobby.Capabilities(), func(c protocol.Capability) bool { return c.Name == "sink" })
	}
	big := strings.Repeat("x", 256<<10)
	sent := 0
	for ; sent < 100 && sinkOffered(); sent++ {
		flooder.send(lobby.TypeRequest, "stuck", fmt.Sprintf("f%d", sent), map[string]any{"capability_name": "sink", "blob": big})
		// Meanwhile others are served at once.
		other.send(lobby.TypeDiscoverServices, lobby.DefaultID, "", lobby.DiscoverServicesPayload{CapabilityName: "fine"})
		other.expect(lobby.TypeServicesAvailable)
	}
	waitFor(t, "the stuck agent to be disconnected", func() bool { return !sinkOffered() })
	// Every request the flooder sent is answered, with an error.
	for i := range sent {
		if got := receive(t, types, fmt.Sprintf("RESPONSE %d of %d", i+1, sent)); got != lobby.TypeResponse {
			t.Fatalf("flooder received %s", got)
		}
	}
	other.quiet()
	_ = flooder.ws.CloseNow()
	receive(t, readerDone, "the flooder's reader")
}

func TestBusy(t *testing.T) {
	limits := lobby.DefaultLimits()
	limits.MaxConcurrentCalls = 2
	tl := newTestLobby(t, lobby.WithLimits(limits))
	hunter := dialLobby(t, tl.url, "hunter")
	hunter.register(protocol.Capability{Name: "search"})
	shopper := dialLobby(t, tl.url, "shopper")
	shopper.register()
	for _, conv := range []string{"a", "b"} {
		shopper.send(lobby.TypeRequest, "hunter", conv, map[string]any{"capability_name": "search"})
		hunter.expect(lobby.TypeRequest)
	}
	shopper.send(lobby.TypeRequest, "hunter", "c", map[string]any{"capability_name": "search"})
	shopper.expectError(protocol.CodeRateLimited, "busy")
	hunter.quiet()
}

func TestConversationInFlight(t *testing.T) {
	tl := newTestLobby(t)
	hunter := dialLobby(t, tl.url, "hunter")
	hunter.register(protocol.Capability{Name: "search"})
	shopper := dialLobby(t, tl.url, "shopper")
	shopper.register()
	shopper.send(lobby.TypeRequest, "hunter", "a", map[string]any{"capability_name": "search"})
	hunter.expect(lobby.TypeRequest)
	shopper.send(lobby.TypeRequest, "hunter", "a", map[string]any{"capability_name": "search"})
	shopper.expectErrorResponse(protocol.CodeInvalidMessage, "already waiting")
	hunter.send(lobby.TypeResponse, "shopper", "a", map[string]any{"status": "success"})
	shopper.expect(lobby.TypeResponse)
	hunter.quiet()
}

func TestClose(t *testing.T) {
	tl := newTestLobby(t)
	hunter := dialLobby(t, tl.url, "hunter")
	hunter.register(protocol.Capability{Name: "search"})
	shopper := dialLobby(t, tl.url, "shopper")
	shopper.register()
	// A request in flight from a lobby client, one from the mesh, and a
	// mesh call that blocks.
	shopper.send(lobby.TypeRequest, "hunter", "c1", map[string]any{"capability_name": "search"})
	hunter.expect(lobby.TypeRequest)
	shopper.send(lobby.TypeRequest, peerID, "c2", map[string]any{"capability_name": "block"})
	receive(t, tl.mesh.entered, "the mesh call")
	served := make(chan error, 1)
	go func() {
		_, err := tl.lobby.Serve(context.Background(), peerID, "search", nil)
		served <- err
	}()
	hunter.expect(lobby.TypeRequest)

	var closed atomic.Bool
	go func() {
		_ = tl.lobby.Close()
		closed.Store(true)
	}()
	if err := receive(t, served, "Serve to end"); protocol.CodeOf(err) != protocol.CodeInternalError {
		t.Fatalf("Serve during Close: %v", err)
	}
	receive(t, tl.mesh.cancelled, "the mesh call to be cancelled")
	for _, c := range []*lobbyClient{hunter, shopper} {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		for {
			if _, _, err := c.ws.Read(ctx); err != nil {
				if s := websocket.CloseStatus(err); s != websocket.StatusGoingAway {
					t.Errorf("%s: closed with %v, want 1001", c.id, err)
				}
				break
			}
		}
		cancel()
	}
	waitFor(t, "Close to return", closed.Load)
	if _, err := tl.lobby.Serve(ctxT(t), peerID, "search", nil); protocol.CodeOf(err) != protocol.CodeInternalError {
		t.Fatalf("Serve after Close: %v", err)
	}
	if err := tl.lobby.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNewOptions(t *testing.T) {
	st := lobbyStore(t, filepath.Join(t.TempDir(), "store.db"))
	defer st.Close()
	mesh := newFakeMesh()
	for _, tc := range []struct {
		mesh lobby.Mesh
		st   *store.Store
		opt  lobby.Option
	}{
		{nil, st, nil},
		{mesh, nil, nil},
		{mesh, st, lobby.WithLogger(nil)},
		{mesh, st, lobby.WithLimits(lobby.Limits{})},
		{mesh, st, lobby.WithID("")},
		{mesh, st, lobby.WithRequestTimeout(0)},
		{mesh, st, lobby.WithDiscoverTimeout(-1)},
		{mesh, st, lobby.WithOriginPatterns("[")},
		{mesh, st, lobby.WithMaxRegistrations(0)},
	} {
		if l, err := lobby.New(tc.mesh, tc.st, tc.opt); err == nil {
			_ = l.Close()
			t.Errorf("New accepted a bad configuration (%v)", tc)
		}
	}
	l, err := lobby.New(mesh, st, lobby.WithID("my_lobby"), lobby.WithOriginPatterns("example.com"))
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Close()
}

func TestParseMessage(t *testing.T) {
	for _, tc := range []struct{ frame, want, err string }{
		{`{"message_type":"REGISTER","sender_id":"a","auth_token":null}`,
			`{"sender_id":"a","receiver_id":"","message_type":"REGISTER","payload":{}}`, ""},
		{`{"sender_id":"a","receiver_id":"b","message_type":"REQUEST","payload":{"capability_name":"x"},"conversation_id":"c","auth_token":"t","timestamp":1}`,
			`{"sender_id":"a","receiver_id":"b","message_type":"REQUEST","payload":{"capability_name":"x"},"conversation_id":"c","auth_token":"t"}`, ""},
		{`{"message_type":"X","payload":null,"conversation_id":null}`, `{"sender_id":"","receiver_id":"","message_type":"X","payload":{}}`, ""},
		{`{"message_type":"X","auth_token":7}`, "", `"auth_token" must be a string`},
		{`{"message_type":""}`, "", `"message_type" is required`},
		{`{"message_type":"X","payload":"{}"}`, "", `"payload" must be an object`},
		{`{"message_type":"X","payload":{"a":1,"a":1}}`, "", `duplicate member "a"`},
		{`{"message_type":"X","message_type":"X"}`, "", `duplicate member "message_type"`},
		{`"REGISTER"`, "", "not a JSON object"},
	} {
		m, err := lobby.ParseMessage([]byte(tc.frame))
		if tc.err != "" {
			if protocol.CodeOf(err) != protocol.CodeInvalidMessage || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want INVALID_MESSAGE mentioning %q", tc.frame, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.frame, err)
			continue
		}
		b, _ := json.Marshal(m)
		if string(b) != tc.want {
			t.Errorf("%s: decoded as\n\t%s\nwant\n\t%s", tc.frame, b, tc.want)
		}
	}
	// On error the fields read so far are kept for the ERROR reply.
	m, err := lobby.ParseMessage([]byte(`{"message_type":"REQUEST","conversation_id":"c7","payload":[]}`))
	if err == nil || m == nil || m.MessageType != lobby.TypeRequest || m.ConversationID != "c7" {
		t.Fatalf("partial message %+v %v", m, err)
	}
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		t.Fatalf("%T is not a *protocol.Error", err)
	}
}

var update = flag.Bool("update", false, "rewrite the <-- lines of testdata/*.txt with what the lobby sends")

// TestTranscripts replays the conversations in testdata/*.txt
// (the format is described at the top of each file). Frames are compared
// as compact JSON, byte for byte: field order is part of the contract.
// At the end every client sends a frame of an unknown type and must
// receive its ERROR next, so an extra frame fails the test. With -update
// the <-- lines are rewritten with what the lobby sent; review the diff.
func TestTranscripts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no lobby transcripts: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runTranscript(t, file)
		})
	}
}

func runTranscript(t *testing.T, file string) {
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	tl := newTestLobby(t)
	var issued atomic.Int64
	lobby.SetTokens(tl.lobby, func() string { return fmt.Sprintf("token-%d", issued.Add(1)) })
	clients := make(map[string]*websocket.Conn)
	client := func(name string) *websocket.Conn {
		if clients[name] == nil {
			clients[name] = dialRaw(t, tl.url)
		}
		return clients[name]
	}
	lines := strings.Split(string(src), "\n")
	changed := false
	for i, line := range lines {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, ok := strings.Cut(line, " ")
		switch {
		case ok && strings.HasPrefix(rest, "--> "):
			writeFrame(t, client(name), strings.TrimPrefix(rest, "--> "))
		case ok && strings.HasPrefix(rest, "<-- "):
			got := compact(readFrame(t, client(name)))
			if *update {
				if nl := name + " <-- " + got; nl != line {
					lines[i], changed = nl, true
				}
				continue
			}
			if want := compact(strings.TrimPrefix(rest, "<-- ")); got != want {
				t.Errorf("%s:%d: %s received\n\t%s\nwant\n\t%s", file, i+1, name, got, want)
			}
		default:
			t.Fatalf("%s:%d: a line is <client> --> frame, <client> <-- frame, or a # comment", file, i+1)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(clients)) {
		writeFrame(t, clients[name], `{"message_type":"TRANSCRIPT_END"}`)
		if got := readFrame(t, clients[name]); !strings.Contains(got, `"TRANSCRIPT_END"`) {
			t.Errorf("%s: after the transcript %s received %s", file, name, got)
		}
	}
	if *update && changed {
		if err := os.WriteFile(file, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("rewrote %s", file)
	}
}

func TestMaxRegistrations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	tl := lobbyAt(t, path, lobby.WithMaxRegistrations(2))
	a := dialLobby(t, tl.url, "agent_a")
	a.register()
	b := dialLobby(t, tl.url, "agent_b")
	b.register()
	c := dialLobby(t, tl.url, "agent_c")
	c.send(lobby.TypeRegister, lobby.DefaultID, "", lobby.RegisterPayload{})
	c.expectError(protocol.CodeRateLimited, "most registrations")
	a.register(protocol.Capability{Name: "still_allowed"}) // re-registering
	_, _, _ = a.ws.CloseNow(), b.ws.CloseNow(), c.ws.CloseNow()
	tl.stop()

	// A restarted lobby counts what the store holds.
	tl = lobbyAt(t, path, lobby.WithMaxRegistrations(2))
	d := dialLobby(t, tl.url, "agent_d")
	d.send(lobby.TypeRegister, lobby.DefaultID, "", lobby.RegisterPayload{})
	d.expectError(protocol.CodeRateLimited, "most registrations")
}

func TestOriginsAndMaxClients(t *testing.T) {
	limits := lobby.DefaultLimits()
	limits.MaxClients = 2
	tl := newTestLobby(t, lobby.WithOriginPatterns("app.example.com"), lobby.WithLimits(limits))
	for _, tc := range []struct {
		origin string
		status int
	}{
		{"https://evil.example", http.StatusForbidden},
		{"https://app.example.com", 0},
		{"", 0}, // not a browser
	} {
		h := http.Header{}
		if tc.origin != "" {
			h.Set("Origin", tc.origin)
		}
		ws, resp, err := websocket.Dial(ctxT(t), tl.url, &websocket.DialOptions{HTTPHeader: h})
		if tc.status == 0 {
			if err != nil {
				t.Fatalf("origin %q refused: %v", tc.origin, err)
			}
			defer ws.CloseNow()
			// Registered, so that the third client is refused rather than
			// given the slot of a connection that never registered.
			(&lobbyClient{t: t, ws: ws, id: fmt.Sprintf("agent_origin_%d", len(tc.origin))}).register()
			continue
		}
		if err == nil {
			_ = ws.CloseNow()
			t.Fatalf("origin %q accepted", tc.origin)
		}
		if resp == nil || resp.StatusCode != tc.status {
			t.Fatalf("origin %q refused with %v, want HTTP %d", tc.origin, resp, tc.status)
		}
	}
	waitFor(t, "two clients", func() bool { return tl.lobby.Clients() == 2 })
	_, resp, err := websocket.Dial(ctxT(t), tl.url, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a third client: %v %v, want HTTP 503", resp, err)
	}
}
