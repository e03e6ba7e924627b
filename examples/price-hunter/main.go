// Command price-hunter runs seed 000's price-hunter flow on a relay's lobby,
// every agent a real WebSocket client, and bridges it to the mesh.
//
// By default it starts a relay in this process (a node, seed 000's lobby
// served at /lobby on a free loopback port, registrations in a store in a
// temporary directory) and a plain mesh node connected to it. Then:
//
//   - two price hunters register in the lobby (§5.1), each offering
//     find_cheapest_item_price_v2 restricted to the shopper, the first also
//     initiate_item_search_v2 (public);
//   - the mesh node offers find_cheapest_item_price_v2 in the mesh;
//   - the shopper registers, discovers both capabilities (§5.2: the lobby's
//     agents and the mesh directory's) and requests them (§5.3), getting
//     in_progress and final RESPONSEs, and picks the cheapest price, the
//     mesh agent's included (a lobby client calling a mesh agent);
//   - rogue_007 requests the restricted capability and is refused by the
//     lobby (§5.3), which the hunter never hears of; an impostor with a
//     forged token gets ERROR (§4.7, §6);
//   - the mesh node finds initiate_item_search_v2 in the mesh directory
//     (the relay offers its lobby agents' capabilities as its own) and calls
//     it, and is refused the restricted one.
//
// With -lobby (and -relay for the mesh side) it runs the same agents
// against a running `meshagent relay`.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

func main() {
	lobbyURL := flag.String("lobby", "", "`URL` of a running relay's lobby, e.g. ws://127.0.0.1:7892/lobby (default: start a relay in this process)")
	relayAddr := flag.String("relay", "", "`MULTIADDR` of that relay's node, with /p2p/<agent id>, for the mesh side (only with -lobby)")
	timeout := flag.Duration("timeout", time.Minute, "give up after `D`")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var err error
	if *lobbyURL == "" {
		if *relayAddr != "" {
			fmt.Fprintln(os.Stderr, "price-hunter: -relay needs -lobby")
			os.Exit(2)
		}
		err = run(ctx, os.Stdout)
	} else {
		err = runExternal(ctx, os.Stdout, *lobbyURL, *relayAddr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "price-hunter:", err)
		os.Exit(1)
	}
}

// run starts a relay in this process and runs the flow on it.
func run(ctx context.Context, out io.Writer) (err error) {
	quiet := slog.New(slog.DiscardHandler)
	r, err := startRelay(quiet)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, r.close()) }()
	fmt.Fprintf(out, "relay: lobby at %s, node %s\n", r.url, r.node.AgentID())
	return runOn(ctx, out, setup{
		lobbyURL:   r.url,
		relayID:    r.node.ID(),
		relayAddrs: r.node.Addrs(),
		log:        quiet,
	})
}

// runExternal runs the flow against a running relay: its lobby at
// lobbyURL and, if relayAddr is not empty, its node for the mesh side.
// Agent ids get a random suffix, since the relay keeps registrations and
// refuses to register an agent id twice without its token.
func runExternal(ctx context.Context, out io.Writer, lobbyURL, relayAddr string) error {
	var b [3]byte
	_, _ = rand.Read(b[:])
	s := setup{lobbyURL: lobbyURL, suffix: "_" + hex.EncodeToString(b[:]), log: slog.New(slog.DiscardHandler)}
	if relayAddr != "" {
		a, err := ma.NewMultiaddr(relayAddr)
		if err != nil {
			return fmt.Errorf("-relay: %w", err)
		}
		info, err := peer.AddrInfoFromP2pAddr(a)
		if err != nil {
			return fmt.Errorf("-relay must end with /p2p/<agent id>: %w", err)
		}
		s.relayID, s.relayAddrs = info.ID, []ma.Multiaddr{a}
	}
	fmt.Fprintf(out, "relay: lobby at %s\n", lobbyURL)
	return runOn(ctx, out, s)
}

// setup says where the flow runs.
type setup struct {
	lobbyURL   string
	relayID    peer.ID        // empty: no mesh side
	relayAddrs []ma.Multiaddr // to reach the relay's node (with or without /p2p)
	suffix     string         // appended to every lobby agent id
	log        *slog.Logger
}

// Capabilities of the flow (seed 000 §4.5, §4.6).
const (
	capSearch   = "initiate_item_search_v2"
	capCheapest = "find_cheapest_item_price_v2"
)

// item is what the shopper hunts for.
const item = "Bose QuietComfort headphones"

// searchInput is the input schema of initiate_item_search_v2.
const searchInput = `{"type":"object","required":["item_to_find","target_website"],"properties":{"item_to_find":{"type":"string"},"target_website":{"type":"string"}}}`

// cheapestInput is the input schema of find_cheapest_item_price_v2.
const cheapestInput = `{"type":"object","required":["item_name"],"properties":{"item_name":{"type":"string","minLength":1}}}`

// cheapestOutput is the output schema of find_cheapest_item_price_v2.
const cheapestOutput = `{"type":"object","required":["cheapest_price","source"],"properties":{"item_name":{"type":"string"},"cheapest_price":{"type":"number"},"source":{"type":"string"},"url":{"type":"string"}}}`

// quote is a find_cheapest_item_price_v2 result.
type quote struct {
	ItemName      string  `json:"item_name"`
	CheapestPrice float64 `json:"cheapest_price"`
	Source        string  `json:"source"`
	URL           string  `json:"url,omitempty"`
}

// searchResult is an initiate_item_search_v2 result (seed 000 §4.6's
// example).
type searchResult struct {
	ItemFoundOnSite struct {
		Name          string  `json:"name"`
		RegularPrice  float64 `json:"regular_price"`
		SourceWebsite string  `json:"source_website"`
		URL           string  `json:"url"`
	} `json:"item_found_on_site"`
	CheapestPriceGlobally quote  `json:"cheapest_price_globally"`
	Message               string `json:"message"`
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
