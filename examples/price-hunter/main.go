// Command price-hunter runs seed 000's price-hunter flow on a relay's
// lobby, every agent a real WebSocket client, and bridges it to the mesh.
//
// It starts a relay in this process, reduced to the lobby as `meshagent
// relay` runs it: a node on loopback, seed 000's lobby served at /lobby,
// registrations in a store in a temporary directory, and the lobby agents'
// capabilities offered in the mesh as the node's own (Lobby.Bridge). Then
// two price hunters register in the lobby (§5.1); a plain mesh node offers
// the same capability in the mesh; the shopper discovers every provider,
// the lobby's and the mesh's (§5.2), asks each (§5.3) and takes the
// cheapest; the lobby refuses rogue_007 and an impostor (§5.3, §4.7); and
// the mesh node finds a lobby agent's capability in the mesh directory
// and calls it through the relay.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// Capabilities of the flow (seed 000 §4.5, §4.6), and the item hunted.
const (
	capSearch   = "initiate_item_search_v2"
	capCheapest = "find_cheapest_item_price_v2"
	item        = "Bose QuietComfort headphones"
)

// cheapest is the capability object of find_cheapest_item_price_v2 (§7),
// which only the agents named in allow may call.
func cheapest(allow ...string) protocol.Capability {
	return protocol.Capability{Name: capCheapest, Description: "Finds the cheapest price of an item",
		InputSchema:            json.RawMessage(`{"type":"object","required":["item_name"],"properties":{"item_name":{"type":"string"}}}`),
		AuthorizedRequesterIDs: allow}
}

// search is the capability object of initiate_item_search_v2, public.
var search = protocol.Capability{Name: capSearch, Description: "Searches a website for an item",
	InputSchema: json.RawMessage(`{"type":"object","required":["item_to_find","target_website"]}`)}

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "price-hunter:", err)
		os.Exit(1)
	}
}

// newNode starts a quiet node with a fresh key on loopback, without mDNS.
func newNode(name string, opts ...node.Option) (*node.Node, error) {
	key, err := sign.GenerateKey()
	if err != nil {
		return nil, err
	}
	return node.New(append([]node.Option{node.WithIdentity(key), node.WithName(name), node.WithMDNS(false),
		node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")), node.WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
}

// run starts the relay, the mesh agent and the lobby agents and runs the
// flow, printing each step to out.
func run(ctx context.Context, out io.Writer) error {
	// The relay: a node (its directory, the DHT, is how the mesh and the
	// lobby find each other's capabilities), a store and the lobby.
	dir, err := os.MkdirTemp("", "price-hunter-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(filepath.Join(dir, "relay.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	relay, err := newNode("relay")
	if err != nil {
		return err
	}
	defer relay.Close()
	lb, err := lobby.New(relay, st, lobby.WithDiscoverTimeout(2*time.Second), lobby.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	defer lb.Close()
	lb.Bridge(lobby.OffererFunc(func(ss []lobby.Service) error {
		var ns []node.Service
		for _, s := range ss {
			ns = append(ns, node.Service{Capability: s.Capability, Handler: node.HandlerFunc(
				func(ctx context.Context, c *node.Call) (json.RawMessage, error) {
					return s.Serve(ctx, c.Requester(), c.Request.Params)
				})})
		}
		return relay.SetServices(ns)
	}))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	served := make(chan struct{})
	go func() { defer close(served); _ = http.Serve(l, lb) }()
	defer func() { _ = l.Close(); <-served }()
	url := "ws://" + l.Addr().String() + "/lobby"
	fmt.Fprintf(out, "relay: lobby at %s, node %s\n", url, relay.AgentID())

	// A mesh agent offering find_cheapest_item_price_v2 to anyone.
	mesh, err := newNode("mesh_hunter", node.WithBootstrap(relay.Addrs()...), node.WithServices(node.Service{
		Capability: cheapest(), Handler: node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
			fmt.Fprintf(out, "mesh_hunter: signed request from %s\n", c.From)
			return json.Marshal(quote{99.9, "MeshMart (mock)"})
		})}))
	if err != nil {
		return err
	}
	defer mesh.Close()
	fmt.Fprintf(out, "mesh_hunter: mesh node %s offers %s\n", mesh.AgentID(), capCheapest)

	// Lobby agents: two hunters, the shopper they serve, and a rogue.
	var clients []*client
	var hunters sync.WaitGroup
	defer func() {
		for _, c := range clients {
			_ = c.ws.CloseNow()
		}
		hunters.Wait()
	}()
	join := func(id string, caps ...protocol.Capability) (*client, error) {
		c, err := register(ctx, url, id, caps)
		if err == nil {
			clients = append(clients, c)
			fmt.Fprintf(out, "%s: REGISTER_ACK with a token\n", id)
		}
		return c, err
	}
	hunterA, err := join("price_hunter_A2_v2", search, cheapest("shopper_B1"))
	if err != nil {
		return err
	}
	hunterC, err := join("price_hunter_C3_v1", cheapest("shopper_B1"))
	if err != nil {
		return err
	}
	hunters.Go(func() { hunterA.serve(ctx, out, quote{108.8, "DiscountDealz.com (mock)"}) })
	hunters.Go(func() { hunterC.serve(ctx, out, quote{112.5, "BargainBin.com (mock)"}) })
	shopper, err := join("shopper_B1")
	if err != nil {
		return err
	}
	rogue, err := join("rogue_007")
	if err != nil {
		return err
	}

	// §5.3 with progress: the seed's search request.
	ms, err := shopper.ask(ctx, hunterA.id, lobby.TypeRequest, "conv-1", map[string]any{
		"capability_name": capSearch, "item_to_find": item, "target_website": "amazon.com"})
	if err != nil {
		return err
	}
	for _, m := range ms {
		fmt.Fprintf(out, "shopper_B1: %s %s from %s: %s\n", m.MessageType, m.ConversationID, m.SenderID, m.Payload)
	}

	// §5.2: every provider of find_cheapest_item_price_v2, the mesh
	// agent's once the mesh directory has its record.
	var found []lobby.ServiceFound
	err = poll(ctx, "the mesh agent in SERVICES_AVAILABLE", func() (bool, error) {
		ms, err := shopper.ask(ctx, lobby.DefaultID, lobby.TypeDiscoverServices, "disc", lobby.DiscoverServicesPayload{CapabilityName: capCheapest})
		if err != nil {
			return false, err
		}
		var sa lobby.ServicesAvailablePayload
		err = json.Unmarshal(ms[0].Payload, &sa)
		found = sa.ServicesFound
		return slices.ContainsFunc(found, func(f lobby.ServiceFound) bool { return f.AgentID == mesh.AgentID() }), err
	})
	if err != nil {
		return err
	}
	// §5.3: ask each, a mesh agent through the lobby like the others.
	var best quote
	for i, f := range found {
		ms, err := shopper.ask(ctx, f.AgentID, lobby.TypeRequest, fmt.Sprint("conv-", i+2), map[string]any{"capability_name": capCheapest, "item_name": item})
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

	// §5.3's authorization check, and §4.7's bad token: the lobby answers
	// itself and the hunter never hears of it.
	ms, err = rogue.ask(ctx, hunterA.id, lobby.TypeRequest, "conv-r1", map[string]any{"capability_name": capCheapest, "item_name": item})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "rogue_007: %s from %s: %s\n", ms[0].MessageType, ms[0].SenderID, ms[0].Payload)
	impostor, err := dial(ctx, url, "shopper_B1")
	if err != nil {
		return err
	}
	clients = append(clients, impostor)
	impostor.token = "forged-token"
	ms, err = impostor.ask(ctx, hunterA.id, lobby.TypeRequest, "conv-x1", map[string]any{"capability_name": capCheapest, "item_name": item})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "impostor as shopper_B1: %s: %s\n", ms[0].MessageType, ms[0].Payload)

	// The mesh side: the relay offers the lobby agents' capabilities as its
	// own; the mesh node finds one in the directory and calls it.
	err = poll(ctx, "the relay offering "+capSearch+" in the mesh directory", func() (bool, error) {
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

// poll calls try every 100 ms until it reports done or fails, or ctx ends:
// directory records take a moment to spread.
func poll(ctx context.Context, what string, try func() (bool, error)) error {
	for {
		if done, err := try(); done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// quote is a find_cheapest_item_price_v2 result.
type quote struct {
	Price  float64 `json:"cheapest_price"`
	Source string  `json:"source"`
}
