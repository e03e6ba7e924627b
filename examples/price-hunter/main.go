// Command price-hunter runs seed 000's price-hunter flow on a relay's
// lobby, every agent a real WebSocket client, bridged to the mesh: a mesh
// node's capability is found and called from the lobby, and a lobby
// agent's from the mesh. main.go is the relay and the shopper's steps;
// hunters.go is the hunters. See README.md for the steps.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/daemon"
	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

const (
	capSearch   = "initiate_item_search_v2"
	capCheapest = "find_cheapest_item_price_v2"
	item        = "Bose QuietComfort headphones"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "price-hunter:", err)
		os.Exit(1)
	}
}

func newNode(name string, opts ...node.Option) (*node.Node, error) {
	key, err := sign.GenerateKey()
	if err != nil {
		return nil, err
	}
	return node.New(append([]node.Option{node.WithIdentity(key), node.WithName(name), node.WithMDNS(false),
		node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")), node.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
}

func run(ctx context.Context, out io.Writer) error {
	// The relay, served as meshagent relay serves one (daemon.Start): the
	// lobby at /lobby of its public listener, the lobby agents'
	// capabilities offered in the mesh as its node's own.
	dir, err := os.MkdirTemp("", "price-hunter-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	relay, err := newNode("relay")
	if err != nil {
		return err
	}
	defer relay.Close()
	cfg := daemon.DefaultConfig() // its store in dir, its public listener on a free port
	cfg.Node, cfg.DataDir, cfg.Logger, cfg.Public.Addr = relay, dir, slog.New(slog.DiscardHandler), "127.0.0.1:0"
	d, err := daemon.Start(ctx, daemon.WithConfig(cfg))
	if err != nil {
		return err
	}
	defer d.Close(context.Background())
	url := "ws://" + d.PublicAddr() + "/lobby"
	fmt.Fprintf(out, "relay: lobby at %s, node %s\n", url, relay.AgentID())

	// A mesh agent offering find_cheapest_item_price_v2 to anyone.
	mesh, err := newNode("mesh_hunter", node.WithBootstrap(relay.Addrs()...), node.WithServices(meshHunter(out)))
	if err != nil {
		return err
	}
	defer mesh.Close()
	fmt.Fprintf(out, "mesh_hunter: mesh node %s offers %s\n", mesh.AgentID(), capCheapest)

	// Lobby agents (lobby.Client): two hunters, the shopper they serve, a
	// rogue and an impostor that claims to be the shopper with a forged token.
	var clients []*lobby.Client
	var hunters sync.WaitGroup
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
		hunters.Wait()
	}()
	join := func(id string, caps ...protocol.Capability) *lobby.Client {
		c, e := lobby.Dial(ctx, url, id)
		if e == nil {
			clients = append(clients, c)
			if e = c.Register(ctx, caps...); e == nil {
				fmt.Fprintf(out, "%s: REGISTER_ACK with a token\n", id)
			}
		}
		err = errors.Join(err, e)
		return c
	}
	hunterA, hunterC := join("price_hunter_A2_v2", search, cheapest("shopper_B1")), join("price_hunter_C3_v1", cheapest("shopper_B1"))
	if err != nil {
		return err
	}
	hunters.Go(func() { serve(ctx, out, hunterA, quote{108.8, "DiscountDealz.com (mock)"}) })
	hunters.Go(func() { serve(ctx, out, hunterC, quote{112.5, "BargainBin.com (mock)"}) })
	shopper, rogue := join("shopper_B1"), join("rogue_007")
	if err != nil {
		return err
	}
	impostor, err := lobby.Dial(ctx, url, "shopper_B1", lobby.WithClientToken("forged-token"))
	if err != nil {
		return err
	}
	clients = append(clients, impostor)

	// §5.3 with progress (§4.6): the seed's search request.
	ms, err := shopper.Ask(ctx, hunterA.ID(), lobby.TypeRequest, "conv-1", map[string]any{
		"capability_name": capSearch, "item_to_find": item, "target_website": "amazon.com"})
	for _, m := range ms {
		fmt.Fprintf(out, "shopper_B1: %s %s from %s: %s\n", m.MessageType, m.ConversationID, m.SenderID, m.Payload)
	}
	if err != nil {
		return err
	}

	// §5.2: every provider, the mesh agent's once the directory has it.
	var found []lobby.ServiceFound
	err = poll(ctx, func() (bool, error) {
		sa, err := shopper.Discover(ctx, lobby.DiscoverServicesPayload{CapabilityName: capCheapest})
		if err != nil {
			return false, err
		}
		found = sa.ServicesFound
		return slices.ContainsFunc(found, func(f lobby.ServiceFound) bool { return f.AgentID == mesh.AgentID() }), nil
	})
	if err != nil {
		return err
	}
	// §5.3: ask each, the mesh agent through the lobby like the others.
	var best quote
	for i, f := range found {
		ms, err := shopper.Ask(ctx, f.AgentID, lobby.TypeRequest, fmt.Sprint("conv-", i+2), map[string]any{"capability_name": capCheapest, "item_name": item})
		if err != nil {
			return err
		}
		var q quote
		if err := json.Unmarshal(ms[0].Payload, &q); err != nil {
			return err
		}
		fmt.Fprintf(out, "shopper_B1: %v at %s from %s\n", q.Price, q.Source, f.AgentID)
		if best.Source == "" || q.Price < best.Price {
			best = q
		}
	}
	fmt.Fprintf(out, "shopper_B1: cheapest: %v at %s\n", best.Price, best.Source)

	// §5.3's authorization check and §4.7's bad token: the lobby answers
	// itself and the hunter never hears of it.
	refused := map[string]any{"capability_name": capCheapest, "item_name": item}
	if ms, err = rogue.Ask(ctx, hunterA.ID(), lobby.TypeRequest, "conv-r1", refused); err != nil {
		return err
	}
	fmt.Fprintf(out, "rogue_007: %s from %s: %s\n", ms[0].MessageType, ms[0].SenderID, ms[0].Payload)
	if ms, err = impostor.Ask(ctx, hunterA.ID(), lobby.TypeRequest, "conv-x1", refused); err != nil {
		return err
	}
	fmt.Fprintf(out, "impostor as shopper_B1: %s: %s\n", ms[0].MessageType, ms[0].Payload)

	// The mesh side: the mesh node finds a lobby capability in the
	// directory, offered by the relay's node, and calls it.
	err = poll(ctx, func() (bool, error) {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		infos, err := mesh.Discover(dctx, capSearch, false)
		if err != nil {
			return false, err
		}
		found := false
		for pi := range infos {
			found = found || pi.AgentID == relay.AgentID()
		}
		return found, nil
	})
	if err != nil {
		return err
	}
	res, err := mesh.Call(ctx, protocol.CallRequest{To: relay.AgentID(), Action: capSearch,
		Params: json.RawMessage(`{"item_to_find":"` + item + `","target_website":"bestbuy.com"}`)})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "mesh_hunter: %s through the relay: %s\n", capSearch, res.Result)
	_, err = mesh.Call(ctx, protocol.CallRequest{To: relay.AgentID(), Action: capCheapest, Params: json.RawMessage(`{"item_name":"` + item + `"}`)})
	fmt.Fprintf(out, "mesh_hunter: %s through the relay: %v\n", capCheapest, err)
	return nil
}

// poll calls try every 100 ms until it is done or fails, or ctx ends:
// directory records take a moment to spread.
func poll(ctx context.Context, try func() (bool, error)) error {
	for {
		if done, err := try(); done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
