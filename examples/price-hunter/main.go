// Command price-hunter runs seed 000's price-hunter flow on a relay's
// lobby, every agent a real WebSocket client, bridged to the mesh: a mesh
// node's capability is found and called from the lobby, and a lobby
// agent's from the mesh. See README.md for the steps.
package main

import (
	"context"
	"encoding/json"
	"errors"
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

	"github.com/coder/websocket"
	"github.com/coder/websocket/wsjson"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

const (
	capSearch   = "initiate_item_search_v2"
	capCheapest = "find_cheapest_item_price_v2"
	item        = "Bose QuietComfort headphones"
)

// cheapest is find_cheapest_item_price_v2 (§7), callable only by allow.
func cheapest(allow ...string) protocol.Capability {
	return protocol.Capability{Name: capCheapest, Description: "Finds the cheapest price of an item",
		InputSchema:            json.RawMessage(`{"type":"object","required":["item_name"],"properties":{"item_name":{"type":"string"}}}`),
		AuthorizedRequesterIDs: allow}
}

var search = protocol.Capability{Name: capSearch, Description: "Searches a website for an item",
	InputSchema: json.RawMessage(`{"type":"object","required":["item_to_find","target_website"]}`)}

// quote is a find_cheapest_item_price_v2 result.
type quote struct {
	Price  float64 `json:"cheapest_price"`
	Source string  `json:"source"`
}

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
	// The relay: a node, a store and the lobby, the lobby agents'
	// capabilities offered in the mesh as the node's own.
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

	// Lobby agents: two hunters, the shopper they serve, a rogue and an
	// impostor that claims to be the shopper with a forged token.
	var clients []*client
	var hunters sync.WaitGroup
	defer func() {
		for _, c := range clients {
			_ = c.ws.CloseNow()
		}
		hunters.Wait()
	}()
	join := func(id string, caps ...protocol.Capability) *client {
		c, e := register(ctx, url, id, caps)
		if err = errors.Join(err, e); c != nil {
			clients = append(clients, c)
			fmt.Fprintf(out, "%s: REGISTER_ACK with a token\n", id)
		}
		return c
	}
	hunterA, hunterC := join("price_hunter_A2_v2", search, cheapest("shopper_B1")), join("price_hunter_C3_v1", cheapest("shopper_B1"))
	if err != nil {
		return err
	}
	hunters.Go(func() { hunterA.serve(ctx, out, quote{108.8, "DiscountDealz.com (mock)"}) })
	hunters.Go(func() { hunterC.serve(ctx, out, quote{112.5, "BargainBin.com (mock)"}) })
	shopper, rogue := join("shopper_B1"), join("rogue_007")
	if err != nil {
		return err
	}
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return err
	}
	impostor := &client{id: "shopper_B1", token: "forged-token", ws: ws}
	clients = append(clients, impostor)

	// §5.3 with progress (§4.6): the seed's search request.
	ms, err := shopper.ask(ctx, hunterA.id, lobby.TypeRequest, "conv-1", map[string]any{
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
	// §5.3: ask each, the mesh agent through the lobby like the others.
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

	// §5.3's authorization check and §4.7's bad token: the lobby answers
	// itself and the hunter never hears of it.
	refused := map[string]any{"capability_name": capCheapest, "item_name": item}
	if ms, err = rogue.ask(ctx, hunterA.id, lobby.TypeRequest, "conv-r1", refused); err != nil {
		return err
	}
	fmt.Fprintf(out, "rogue_007: %s from %s: %s\n", ms[0].MessageType, ms[0].SenderID, ms[0].Payload)
	if ms, err = impostor.ask(ctx, hunterA.id, lobby.TypeRequest, "conv-x1", refused); err != nil {
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

// client is a seed 000 lobby agent: a WebSocket connection, one JSON
// message per text message (§3), and the token of its REGISTER_ACK (§6).
type client struct {
	id, token string
	ws        *websocket.Conn
}

// register connects as id and registers caps (§4.1, §4.2).
func register(ctx context.Context, url, id string, caps []protocol.Capability) (*client, error) {
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", id, err)
	}
	c := &client{id: id, ws: ws}
	ms, err := c.ask(ctx, lobby.DefaultID, lobby.TypeRegister, "", lobby.RegisterPayload{Capabilities: append([]protocol.Capability{}, caps...)}) // [], not null
	var ack lobby.RegisterAckPayload
	if err == nil && ms[0].MessageType != lobby.TypeRegisterAck {
		err = fmt.Errorf("%s: REGISTER answered %s %s", id, ms[0].MessageType, ms[0].Payload)
	} else if err == nil {
		err = json.Unmarshal(ms[0].Payload, &ack)
	}
	if err != nil {
		_ = ws.CloseNow()
		return nil, err
	}
	c.token = ack.AuthToken
	return c, nil
}

func (c *client) send(ctx context.Context, to, typ, conv string, payload any) error {
	p, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	return wsjson.Write(ctx, c.ws, lobby.Message{SenderID: c.id, ReceiverID: to, MessageType: typ,
		Payload: p, ConversationID: conv, AuthToken: c.token})
}

func (c *client) recv(ctx context.Context) (*lobby.Message, error) {
	_, b, err := c.ws.Read(ctx)
	if err != nil {
		return nil, err
	}
	return lobby.ParseMessage(b)
}

// ask sends a message and returns the answers of its conversation: the
// RESPONSEs in progress, then the last one (or an ERROR, which names no
// conversation when the message had none).
func (c *client) ask(ctx context.Context, to, typ, conv string, payload any) ([]*lobby.Message, error) {
	if err := c.send(ctx, to, typ, conv, payload); err != nil {
		return nil, err
	}
	var ms []*lobby.Message
	for {
		m, err := c.recv(ctx)
		if err != nil {
			return ms, err
		}
		if m.ConversationID != conv && m.MessageType != lobby.TypeError {
			continue
		}
		ms = append(ms, m)
		var st struct{ Status string }
		if json.Unmarshal(m.Payload, &st) != nil || st.Status != string(protocol.StatusInProgress) {
			return ms, nil
		}
	}
}

// serve answers the hunter's REQUESTs until its connection closes,
// printing each: the search with a RESPONSE in progress first (§4.6),
// the price with q.
func (c *client) serve(ctx context.Context, out io.Writer, q quote) {
	for {
		m, err := c.recv(ctx)
		if err != nil {
			return
		}
		var p struct {
			Capability string `json:"capability_name"`
			Site       string `json:"target_website"`
		}
		if m.MessageType != lobby.TypeRequest || json.Unmarshal(m.Payload, &p) != nil {
			continue
		}
		fmt.Fprintf(out, "%s: REQUEST %s from %s: %s\n", c.id, m.ConversationID, m.SenderID, p.Capability)
		answer := func(v any) { _ = c.send(ctx, m.SenderID, lobby.TypeResponse, m.ConversationID, v) }
		if p.Capability == capSearch {
			answer(map[string]any{"status": "in_progress", "message": "searching " + p.Site})
			answer(map[string]any{"status": "success", "item_found_on_site": map[string]any{"regular_price": 128, "source_website": p.Site},
				"cheapest_price_globally": q, "message": "Search complete."})
		} else {
			answer(map[string]any{"status": "success", "cheapest_price": q.Price, "source": q.Source})
		}
	}
}
