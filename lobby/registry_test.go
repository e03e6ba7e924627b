package lobby_test

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
)

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
		// Capability objects are decoded strictly: exact names, no
		// duplicates, each member of its type.
		{"x", `{"capabilities":[5]}`, `member "capabilities[0]" must be an object`},
		{"x", `{"capabilities":[{"name":"a","name":"b"}]}`, `duplicate member "payload.capabilities[0].name"`},
		{"x", `{"capabilities":[{"Name":"a"}]}`, "name is required"},
		{"x", `{"capabilities":[{"name":"a","keywords":"k"}]}`, `member "capabilities[0].keywords" must be an array`},
	} {
		d := dialLobby(t, tl.url, tc.id)
		d.sendRaw(`{"sender_id":` + strconvQuote(tc.id) + `,"receiver_id":"global_lobby","message_type":"REGISTER","payload":` + tc.payload + `,"auth_token":null}`)
		d.expectError(protocol.CodeInvalidMessage, tc.want)
	}
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

// TestLobbyRefusesConfusableIDs: an agent_id that differs from a
// registered one only by Unicode look-alikes (or ASCII ones: case, 0/O,
// 1/l) is refused at REGISTER, also after a restart.
func TestRefusesConfusableIDs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	tl := lobbyAt(t, path)
	rogue := dialLobby(t, tl.url, "rogue_007")
	rogue.register()

	refuse := func(tl *testLobby, id, want string) {
		t.Helper()
		c := dialLobby(t, tl.url, id)
		c.sendRaw(`{"sender_id":` + strconvQuote(id) + `,"receiver_id":"global_lobby","message_type":"REGISTER","payload":{},"auth_token":null}`)
		c.expectError(protocol.CodeInvalidMessage, want)
	}
	for _, id := range []string{
		"rogue_\u041e\u041e7",                // Cyrillic capital O twice
		"r\u043egue_007",                     // Cyrillic small o
		"\uff52\uff4f\uff47\uff55\uff45_007", // fullwidth "rogue"
		"rogue_\U0001D7EC\U0001D7EC7",        // mathematical sans-serif zeros
		"rogue_007\u200b",                    // a zero-width space
		"rogue\uff3f007",                     // fullwidth low line
		"ro\u0261ue_007",                     // Latin small script g
		"caf\u00e9",                          // any non-ASCII, look-alike or not
	} {
		refuse(tl, id, "must be printable ASCII")
	}
	for _, id := range []string{"rogue_OO7", "Rogue_007", "ROGUE_0O7", "rogue_oo7"} {
		refuse(tl, id, `looks like the registered agent "rogue_007"`)
	}
	refuse(tl, "GL0BAL_LOBBY", "looks like the lobby's own id")
	refuse(tl, "a/b", "without '/' or '*'")
	refuse(tl, "a*", "without '/' or '*'")

	// Different ids are fine, and the registered agent re-registers.
	other := dialLobby(t, tl.url, "rogue_008")
	other.register()
	rogue.register()
	modern := dialLobby(t, tl.url, "modern_wave")
	modern.register()

	// After a restart the registered ids still count.
	_ = rogue.ws.CloseNow()
	_ = other.ws.CloseNow()
	_ = modern.ws.CloseNow()
	tl.stop()
	tl = lobbyAt(t, path)
	refuse(tl, "rogue_0O7", `looks like the registered agent "rogue_007"`)
	refuse(tl, "rnodern_vvave", `looks like the registered agent "modern_wave"`)
	refuse(tl, "rogue_OO8", `looks like the registered agent "rogue_008"`)
}
