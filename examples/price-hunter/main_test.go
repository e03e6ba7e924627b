package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRun runs the flow and checks its steps, in order (RELAY and MESH
// stand for the relay's and the mesh node's agent ids), and that no
// request the lobby refused reached a hunter.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var buf bytes.Buffer
	if err := run(ctx, &buf); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	out := buf.String()
	relay := regexp.MustCompile(`(?m)^relay: lobby at ws://127\.0\.0\.1:\d+/lobby, node (12D3KooW\w+)$`).FindStringSubmatch(out)
	mesh := regexp.MustCompile(`(?m)^mesh_hunter: mesh node (12D3KooW\w+) offers`).FindStringSubmatch(out)
	if relay == nil || mesh == nil {
		t.Fatalf("no relay or mesh node line:\n%s", out)
	}
	rest := out
	for _, want := range []string{
		"shopper_B1: REGISTER_ACK with a token",
		"price_hunter_A2_v2: REQUEST conv-1 from shopper_B1: initiate_item_search_v2",
		`shopper_B1: RESPONSE conv-1 from price_hunter_A2_v2: {"message":"searching amazon.com","status":"in_progress"}`,
		`shopper_B1: RESPONSE conv-1 from price_hunter_A2_v2: {"cheapest_price_globally":{"cheapest_price":108.8,`,
		"shopper_B1: 108.8 at DiscountDealz.com (mock) from price_hunter_A2_v2",
		"shopper_B1: 112.5 at BargainBin.com (mock) from price_hunter_C3_v1",
		"mesh_hunter: signed request from RELAY",
		"shopper_B1: 99.9 at MeshMart (mock) from MESH",
		"shopper_B1: cheapest: 99.9 at MeshMart (mock)",
		`rogue_007: RESPONSE from global_lobby: {"status":"error","error":"Unauthorized: Agent 'rogue_007' is not authorized to call capability 'find_cheapest_item_price_v2' on agent 'price_hunter_A2_v2'.","code":"UNAUTHORIZED"}`,
		`impostor as shopper_B1: ERROR: {"error":"Authentication failed: invalid auth_token for sender_id \"shopper_B1\"","code":"UNAUTHORIZED"`,
		"price_hunter_A2_v2: REQUEST ",
		`mesh_hunter: initiate_item_search_v2 through the relay: {"cheapest_price_globally":{"cheapest_price":108.8,`,
		"mesh_hunter: find_cheapest_item_price_v2 through the relay: UNAUTHORIZED: Unauthorized: Agent 'MESH' is not authorized",
	} {
		want = strings.NewReplacer("RELAY", relay[1], "MESH", mesh[1]).Replace(want)
		i := strings.Index(rest, "\n"+want)
		if i < 0 {
			t.Fatalf("output lacks %q (in order):\n%s", want, out)
		}
		rest = rest[i+1:]
	}
	// The hunters print every REQUEST they get: four, none refused.
	received := regexp.MustCompile(`(?m)^price_hunter_\w+: REQUEST .*$`).FindAllString(out, -1)
	for _, line := range received {
		if strings.Contains(line, "rogue_007") || strings.Contains(line, "conv-x1") || strings.HasSuffix(line, "find_cheapest_item_price_v2") && strings.Contains(line, mesh[1]) {
			t.Errorf("a hunter received a refused request: %s", line)
		}
	}
	if len(received) != 4 {
		t.Errorf("%d REQUESTs reached the hunters, want 4:\n%s", len(received), out)
	}
}
