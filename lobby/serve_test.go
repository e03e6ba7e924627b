package lobby_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
)

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
	wait.For(t, testTimeout, func() error {
		if got := tl.lobby.Capabilities(); len(got) != 1 || got[0].Description != "first" {
			return fmt.Errorf("capabilities %+v, want first's search", got)
		}
		return nil
	})
}
