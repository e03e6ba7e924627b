package lobby_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
)

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

// TestBridge: the bridge offers the connected agents' capabilities as
// mesh services without their authorized_requester_ids, each served by
// Serve for the requester it is given (the lobby applies the list), and
// offers the set again when it changes; a failed offer does not stop the
// next one.
func TestBridge(t *testing.T) {
	tl := newTestLobby(t)
	offers := make(chan []lobby.Service, 16)
	fail := true
	tl.lobby.Bridge(lobby.OffererFunc(func(ss []lobby.Service) error {
		offers <- ss
		if fail {
			fail = false // offers run one at a time, on the lobby's goroutine
			return errors.New("node closed")
		}
		return nil
	}))
	next := func(want ...string) []lobby.Service {
		t.Helper()
		for {
			ss := receive(t, offers, "an offer")
			var names []string
			for _, s := range ss {
				names = append(names, s.Capability.Name)
			}
			if len(names) == len(want) && (len(want) == 0 || names[0] == want[0]) {
				return ss
			}
		}
	}

	hunter := dialLobby(t, tl.url, "price_hunter_A2_v2")
	hunter.register(searchCap(peerID))
	next("find_cheapest_item_price_v2") // refused by the offerer
	other := dialLobby(t, tl.url, "weather_bot")
	other.register(protocol.Capability{Name: "forecast"})
	ss := next("find_cheapest_item_price_v2", "forecast")
	if s := ss[0]; len(s.Capability.AuthorizedRequesterIDs) != 0 || s.Capability.Description != "finds the cheapest price" {
		t.Fatalf("offered %+v, want the capability without its authorized_requester_ids", s.Capability)
	}

	type result struct {
		res json.RawMessage
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := ss[0].Serve(ctxT(t), peerID, json.RawMessage(`{"item_name":"X1000"}`))
		done <- result{res, err}
	}()
	req := hunter.expect(lobby.TypeRequest)
	if req.SenderID != peerID || compact(string(req.Payload)) != `{"capability_name":"find_cheapest_item_price_v2","item_name":"X1000"}` {
		t.Fatalf("REQUEST %+v %s", req, req.Payload)
	}
	hunter.send(lobby.TypeResponse, peerID, req.ConversationID, map[string]any{"status": "success", "price": 108.8})
	if r := receive(t, done, "Serve"); r.err != nil || compact(string(r.res)) != `{"price":108.8}` {
		t.Fatalf("Serve: %s %v", r.res, r.err)
	}
	// The list still applies: a requester it does not name is refused.
	if _, err := ss[0].Serve(ctxT(t), selfID, nil); protocol.CodeOf(err) != protocol.CodeUnauthorized {
		t.Fatalf("Serve for an unlisted requester: %v", err)
	}
	hunter.quiet()
}
