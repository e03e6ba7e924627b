package lobby_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
)

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
	wait.For(t, testTimeout, func() error {
		shopper.send(lobby.TypeDiscoverServices, lobby.DefaultID, "", lobby.DiscoverServicesPayload{CapabilityName: "find_cheapest_item_price_v2"})
		decodePayload(t, shopper.expect(lobby.TypeServicesAvailable), &sa)
		if len(sa.ServicesFound) != 2 {
			return fmt.Errorf("another_hunter has not detached: %d services found", len(sa.ServicesFound))
		}
		return nil
	})
}

func discoverFor(t *testing.T, c *lobbyClient, payload map[string]any) lobby.ServicesAvailablePayload {
	t.Helper()
	c.send(lobby.TypeDiscoverServices, lobby.DefaultID, "d", payload)
	var sa lobby.ServicesAvailablePayload
	decodePayload(t, c.expect(lobby.TypeServicesAvailable), &sa)
	return sa
}

// found lists "agent:capability,capability" per agent, in answer order.
func found(sa lobby.ServicesAvailablePayload) []string {
	var out []string
	for _, s := range sa.ServicesFound {
		var names []string
		for _, c := range s.RelevantCapabilities {
			names = append(names, c.Name)
		}
		out = append(out, s.AgentID+":"+strings.Join(names, ","))
	}
	return out
}

// TestLobbyDiscoverKeywords: seed 000 §4.3's query_keywords find lobby
// agents by keyword, name or description, ignoring case, and mesh agents
// by the directory's keyword records.
func TestDiscoverKeywords(t *testing.T) {
	tl := newTestLobby(t)
	hunter := dialLobby(t, tl.url, "price_hunter_A2_v2")
	cheapest := searchCap()
	cheapest.Keywords = []string{"Shopping", "deals"}
	hunter.register(cheapest, protocol.Capability{Name: "initiate_item_search_v2", Description: "Starts a search on one site"})
	weather := dialLobby(t, tl.url, "weather_bot")
	weather.register(protocol.Capability{Name: "forecast", Description: "Forecasts the WEATHER for a city", Keywords: []string{"meteo"}})
	shopper := dialLobby(t, tl.url, "shopper_B1")
	shopper.register()

	for _, tc := range []struct {
		name    string
		payload map[string]any
		want    []string
	}{
		{"a keyword, any case", map[string]any{"query_keywords": []string{"DEALS"}},
			[]string{"price_hunter_A2_v2:find_cheapest_item_price_v2"}},
		{"a word of a description", map[string]any{"query_keywords": []string{"weather"}},
			[]string{"weather_bot:forecast"}},
		{"a part of a name", map[string]any{"query_keywords": []string{"search"}},
			[]string{"price_hunter_A2_v2:initiate_item_search_v2"}},
		{"any keyword matches; the mesh by its keyword records", map[string]any{"query_keywords": []string{"meteo", "Shopping"}},
			[]string{"price_hunter_A2_v2:find_cheapest_item_price_v2", "weather_bot:forecast", peerID + ":mesh_basket"}},
		{"name and keywords", map[string]any{"capability_name": "forecast", "query_keywords": []string{"cheapest"}},
			[]string{"price_hunter_A2_v2:find_cheapest_item_price_v2", "weather_bot:forecast"}},
		{"no match", map[string]any{"query_keywords": []string{"teleport"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sa := discoverFor(t, shopper, tc.payload)
			if got := found(sa); !slices.Equal(got, tc.want) {
				t.Errorf("found %q, want %q", got, tc.want)
			}
			if kws, _ := tc.payload["query_keywords"].([]string); !slices.Equal(sa.DiscoveredForKeywords, kws) {
				t.Errorf("discovered_for_keywords %q, want %q", sa.DiscoveredForKeywords, kws)
			}
			if sa.ServicesFound == nil {
				t.Error("services_found must be a list, even when empty")
			}
		})
	}

	for _, tc := range []struct{ payload, want string }{
		{`{}`, `needs "capability_name" or "query_keywords"`},
		{`{"query_keywords":[]}`, `needs "capability_name" or "query_keywords"`},
		{`{"query_keywords":"price"}`, `"query_keywords" must be an array of strings`},
		{`{"query_keywords":{"a":1}}`, `"query_keywords" must be an array of strings`},
		{`{"query_keywords":[5]}`, `query_keywords[0] must be a string`},
		{`{"query_keywords":["ok",null]}`, `query_keywords[1] must be a string`},
		{`{"query_keywords":["  "]}`, `query_keywords[0] must be 1 to 256 bytes`},
		{`{"query_keywords":["` + strings.Repeat("k", 257) + `"]}`, `must be 1 to 256 bytes`},
		{`{"query_keywords":["a\u0000b"]}`, `control characters`},
		{`{"query_keywords":["1","2","3","4","5","6","7","8","9"]}`, `9 query_keywords, the limit is 8`},
		{`{"capability_name":5,"query_keywords":["x"]}`, `"capability_name" must be a string`},
	} {
		shopper.sendRaw(`{"sender_id":"shopper_B1","receiver_id":"global_lobby","message_type":"DISCOVER_SERVICES","payload":` + tc.payload + `,"auth_token":` + strconvQuote(shopper.token) + `}`)
		shopper.expectError(protocol.CodeInvalidMessage, tc.want)
	}
	shopper.quiet()
}
