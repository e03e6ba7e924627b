package main

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"
)

// lines are the steps every run prints, in order (each a prefix of a
// line; RELAY and MESH stand for the agent ids of the relay and the mesh
// node, which vary between runs).
func lines(suffix string) []string {
	sh, rogue, a, c := "shopper_B1"+suffix, "rogue_007"+suffix, "price_hunter_A2_v2"+suffix, "price_hunter_C3_v1"+suffix
	return []string{
		a + ": REGISTER_ACK with a token; offers initiate_item_search_v2, find_cheapest_item_price_v2 (find_cheapest_item_price_v2 only for " + sh + ")",
		c + ": REGISTER_ACK with a token; offers find_cheapest_item_price_v2 (find_cheapest_item_price_v2 only for " + sh + ")",
		sh + ": REGISTER_ACK with a token",
		rogue + ": REGISTER_ACK with a token",
		sh + ": SERVICES_AVAILABLE initiate_item_search_v2: " + a + " (lobby agent)",
		a + ": REQUEST conv-1 from " + sh + ": initiate_item_search_v2",
		sh + `: RESPONSE conv-1 in_progress: {"message":"searching amazon.com","status":"in_progress"}`,
		sh + `: RESPONSE conv-1 success from ` + a + `: "Bose QuietComfort headphones - amazon.com" at 128 on amazon.com; cheapest anywhere 108.8 at DiscountDealz.com (mock)`,
		sh + ": SERVICES_AVAILABLE find_cheapest_item_price_v2: " + a + " (lobby agent)",
		sh + ": SERVICES_AVAILABLE find_cheapest_item_price_v2: " + c + " (lobby agent)",
		sh + ": SERVICES_AVAILABLE find_cheapest_item_price_v2: MESH (mesh agent)",
		a + ": REQUEST conv-2 from " + sh + ": find_cheapest_item_price_v2",
		sh + ": RESPONSE conv-2 success from " + a + ": 108.8 at DiscountDealz.com (mock)",
		c + ": REQUEST conv-3 from " + sh + ": find_cheapest_item_price_v2",
		sh + ": RESPONSE conv-3 success from " + c + ": 112.5 at BargainBin.com (mock)",
		"mesh_hunter: signed request from RELAY: find_cheapest_item_price_v2",
		sh + ": RESPONSE conv-4 success from MESH: 99.9 at MeshMart (mock)",
		sh + ": cheapest: 99.9 at MeshMart (mock), from MESH (mesh agent)",
		rogue + ": RESPONSE conv-r1 error from global_lobby: UNAUTHORIZED: Unauthorized: Agent '" + rogue + "' is not authorized to call capability 'find_cheapest_item_price_v2' on agent '" + a + "'.",
		rogue + `: DISCOVER_SERVICES with a bad token: ERROR UNAUTHORIZED: Authentication failed: invalid auth_token for sender_id "` + rogue + `"`,
		"impostor as " + sh + `: REQUEST with a forged token: ERROR UNAUTHORIZED: Authentication failed: invalid auth_token for sender_id "` + sh + `"`,
		"mesh_hunter: directory: initiate_item_search_v2 offered by RELAY (the relay): Searches a website for an item and reports the cheapest price found anywhere",
		a + ": REQUEST ",
		`mesh_hunter: initiate_item_search_v2 through the relay: "Bose QuietComfort headphones - bestbuy.com" at 128 on bestbuy.com; cheapest anywhere 108.8 at DiscountDealz.com (mock)`,
		"mesh_hunter: find_cheapest_item_price_v2 through the relay: UNAUTHORIZED: Unauthorized: Agent 'MESH' is not authorized to call capability 'find_cheapest_item_price_v2' on agent '" + c + "'.",
		"no hunter received a refused REQUEST",
	}
}

var (
	relayLine = regexp.MustCompile(`(?m)^relay: lobby at ws://127\.0\.0\.1:\d+/lobby(?:, node (12D3KooW\w+))?$`)
	meshLine  = regexp.MustCompile(`(?m)^mesh_hunter: mesh node (12D3KooW\w+) offers find_cheapest_item_price_v2, connected to the relay's node$`)
)

// check asserts that out has every line of lines(suffix), in order, with
// RELAY and MESH standing for the relay's and the mesh node's agent ids,
// and nothing about a refused request reaching a hunter.
func check(t *testing.T, out, suffix, relayID string) {
	t.Helper()
	m := meshLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no mesh node line:\n%s", out)
	}
	rest := out
	for _, want := range lines(suffix) {
		want = strings.NewReplacer("RELAY", relayID, "MESH", m[1]).Replace(want)
		i := strings.Index(rest, "\n"+want)
		if i < 0 {
			t.Fatalf("output lacks %q (in order):\n%s", want, out)
		}
		rest = rest[i+1:]
	}
	// The hunters print every REQUEST they get: four, none of the refused
	// ones.
	received := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "price_hunter_") && strings.Contains(line, ": REQUEST ") {
			received++
			if strings.Contains(line, "rogue_007") || strings.Contains(line, "conv-x1") ||
				(strings.Contains(line, m[1]) && strings.HasSuffix(line, "find_cheapest_item_price_v2")) {
				t.Errorf("a hunter received a refused request: %s", line)
			}
		}
	}
	if received != 4 {
		t.Errorf("want 4 REQUESTs received by hunters, got %d:\n%s", received, out)
	}
}

func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	m := relayLine.FindStringSubmatch(out.String())
	if m == nil || m[1] == "" {
		t.Fatalf("no relay line:\n%s", out.String())
	}
	check(t, out.String(), "", m[1])
}

// TestRunExternal runs the flow twice against one relay through its URL
// and multiaddr, as against `meshagent relay`: the second run's agents get
// other ids, since the relay keeps the first run's registrations.
func TestRunExternal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := testRelay(t)
	addr := fmt.Sprintf("%s/p2p/%s", r.node.Addrs()[0], r.node.ID())
	suffix := regexp.MustCompile(`(?m)^shopper_B1(_[0-9a-f]{6}): REGISTER_ACK`)
	var suffixes []string
	for range 2 {
		var out bytes.Buffer
		if err := runExternal(ctx, &out, r.url, addr); err != nil {
			t.Fatalf("%v\n%s", err, out.String())
		}
		s := suffix.FindStringSubmatch(out.String())
		if s == nil {
			t.Fatalf("no suffixed shopper:\n%s", out.String())
		}
		check(t, out.String(), s[1], r.node.ID().String())
		suffixes = append(suffixes, s[1])
	}
	if suffixes[0] == suffixes[1] {
		t.Errorf("both runs used agent id suffix %s", suffixes[0])
	}
}

// TestRunExternalNoMesh runs only the lobby part when no relay multiaddr
// is given.
func TestRunExternalNoMesh(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := testRelay(t)
	var out bytes.Buffer
	if err := runExternal(ctx, &out, r.url, ""); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"RESPONSE conv-r1 error from global_lobby: UNAUTHORIZED", "cheapest: 108.8 at DiscountDealz.com (mock)", "no hunter received a refused REQUEST"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "mesh_hunter") {
		t.Errorf("a mesh side without -relay:\n%s", out.String())
	}
}

// testRelay starts an in-process relay that the test's end closes.
func testRelay(t *testing.T) *inProcessRelay {
	t.Helper()
	r, err := startRelay(slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := r.close(); err != nil {
			t.Error(err)
		}
	})
	return r
}
