package lobby_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
)

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
