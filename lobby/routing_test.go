package lobby_test

import (
	"testing"
	"time"

	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
)

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

// TestLobbyVouchesForRequester: a lobby agent's REQUEST to a mesh agent
// reaches the mesh vouching for that lobby agent ("lobby:<agent_id>"), so
// the mesh agent can tell the relay's clients apart.
func TestVouchesForRequester(t *testing.T) {
	tl := newTestLobby(t)
	for _, id := range []string{"alice", "bob"} {
		c := dialLobby(t, tl.url, id)
		c.register()
		c.send(lobby.TypeRequest, peerID, "w-"+id, map[string]any{"capability_name": "whoami"})
		m := c.expect(lobby.TypeResponse)
		if want := `{"status":"success","onBehalfOf":"lobby:` + id + `"}`; compact(string(m.Payload)) != want {
			t.Fatalf("%s: RESPONSE %s, want %s", id, m.Payload, want)
		}
	}
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
