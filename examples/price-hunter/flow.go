package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// hunter is a price-hunter agent: a lobby client that answers REQUESTs
// for its capabilities (§5.3 steps 3 and 4).
type hunter struct {
	c     *lobbyClient
	out   io.Writer
	site  string // the website initiate_item_search_v2 searches; "" if not offered
	quote quote  // its find_cheapest_item_price_v2 answer
	allow []string

	mu   sync.Mutex
	seen []seenRequest // the REQUESTs it received
}

// capabilities returns what the hunter registers (§7).
func (h *hunter) capabilities() []protocol.Capability {
	var caps []protocol.Capability
	if h.site != "" {
		caps = append(caps, protocol.Capability{
			Name:         capSearch,
			Description:  "Searches a website for an item and reports the cheapest price found anywhere",
			InputSchema:  json.RawMessage(searchInput),
			OutputSchema: json.RawMessage(`{}`),
			Keywords:     []string{"shopping", "price"},
		})
	}
	return append(caps, protocol.Capability{
		Name:                   capCheapest,
		Description:            "Finds the cheapest price of an item",
		InputSchema:            json.RawMessage(cheapestInput),
		OutputSchema:           json.RawMessage(cheapestOutput),
		Keywords:               []string{"shopping", "price"},
		AuthorizedRequesterIDs: h.allow,
	})
}

// serve answers REQUESTs until the connection ends.
func (h *hunter) serve(ctx context.Context) {
	for {
		m, err := h.c.recv(ctx)
		if err != nil {
			return // closed at the end of the flow
		}
		switch m.MessageType {
		case lobby.TypeRequest:
			if err := h.answer(ctx, m); err != nil {
				fmt.Fprintf(h.out, "%s: %v\n", h.c.id, err)
			}
		case lobby.TypeError:
			fmt.Fprintf(h.out, "%s: %v\n", h.c.id, lobbyError(m))
		}
	}
}

// answer performs the capability a REQUEST names and sends its RESPONSEs
// back to the requester with the same conversation_id.
func (h *hunter) answer(ctx context.Context, m *lobby.Message) error {
	var p struct {
		CapabilityName string `json:"capability_name"`
		ItemToFind     string `json:"item_to_find"`
		TargetWebsite  string `json:"target_website"`
		ItemName       string `json:"item_name"`
	}
	if err := json.Unmarshal(m.Payload, &p); err != nil {
		return fmt.Errorf("REQUEST payload: %w", err)
	}
	h.mu.Lock()
	h.seen = append(h.seen, seenRequest{from: m.SenderID, capability: p.CapabilityName, conv: m.ConversationID})
	h.mu.Unlock()
	fmt.Fprintf(h.out, "%s: REQUEST %s from %s: %s\n", h.c.id, m.ConversationID, m.SenderID, p.CapabilityName)
	respond := func(payload any) error {
		return h.c.send(ctx, lobby.Message{ReceiverID: m.SenderID, MessageType: lobby.TypeResponse,
			Payload: mustJSON(payload), ConversationID: m.ConversationID})
	}
	switch p.CapabilityName {
	case capSearch:
		if err := respond(map[string]any{"status": "in_progress", "message": "searching " + p.TargetWebsite}); err != nil {
			return err
		}
		var r searchResult
		r.ItemFoundOnSite.Name = p.ItemToFind + " - " + p.TargetWebsite
		r.ItemFoundOnSite.RegularPrice = 128
		r.ItemFoundOnSite.SourceWebsite = p.TargetWebsite
		r.ItemFoundOnSite.URL = "http://" + p.TargetWebsite + "/" + strings.ReplaceAll(p.ItemToFind, " ", "_")
		r.CheapestPriceGlobally = h.quote
		r.CheapestPriceGlobally.ItemName = p.ItemToFind
		r.Message = "Search complete."
		b := mustJSON(r)
		return respond(json.RawMessage(`{"status":"success",` + string(b[1:])))
	case capCheapest:
		q := h.quote
		q.ItemName = p.ItemName
		b := mustJSON(q)
		return respond(json.RawMessage(`{"status":"success",` + string(b[1:])))
	default:
		return respond(map[string]any{"status": "error", "error": "capability not offered: " + p.CapabilityName})
	}
}

// seenRequest is a REQUEST a hunter received.
type seenRequest struct{ from, capability, conv string }

// received returns the first REQUEST the hunter received that refused
// reports as one the lobby should have refused.
func (h *hunter) received(refused func(seenRequest) bool) (seenRequest, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := slices.IndexFunc(h.seen, refused)
	if i < 0 {
		return seenRequest{}, false
	}
	return h.seen[i], true
}

// meshQuote is the mesh agent's find_cheapest_item_price_v2 answer.
var meshQuote = quote{CheapestPrice: 99.9, Source: "MeshMart (mock)", URL: "http://meshmart.example/bose-qc"}

// startMeshAgent starts a plain mesh node connected to the relay's node,
// offering find_cheapest_item_price_v2 in the mesh.
func startMeshAgent(s setup, out io.Writer) (*node.Node, error) {
	key, err := sign.GenerateKey()
	if err != nil {
		return nil, fmt.Errorf("identity: %w", err)
	}
	svc := node.Service{
		Capability: protocol.Capability{
			Name:         capCheapest,
			Description:  "Finds the cheapest price of an item in the mesh's shops",
			InputSchema:  json.RawMessage(cheapestInput),
			OutputSchema: json.RawMessage(cheapestOutput),
			Keywords:     []string{"shopping", "price"},
		},
		Handler: node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
			var p struct {
				ItemName string `json:"item_name"`
			}
			if err := json.Unmarshal(c.Request.Params, &p); err != nil {
				return nil, protocol.Errorf(protocol.CodeInvalidMessage, "params: %v", err)
			}
			fmt.Fprintf(out, "mesh_hunter: signed request from %s: %s\n", c.From, capCheapest)
			q := meshQuote
			q.ItemName = p.ItemName
			return json.Marshal(q)
		}),
	}
	n, err := node.New(node.WithIdentity(key), node.WithName("mesh_hunter"),
		node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")), node.WithMDNS(false),
		node.WithTopics(false), node.WithPresence(node.Presence{}), node.WithLogger(s.log),
		node.WithBootstrap(s.relayAddrs...), node.WithServices(svc))
	if err != nil {
		return nil, fmt.Errorf("start the mesh node: %w", err)
	}
	return n, nil
}

// syncWriter serialises the agents' lines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

// poll calls try every interval until it reports done, fails, or ctx ends.
func poll(ctx context.Context, what string, interval time.Duration, try func() (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		done, err := try()
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

// kind says whether an agent id is a mesh agent's or a lobby agent's.
func kind(id string) string {
	if _, err := sign.ParseAgentID(id); err == nil {
		return "mesh agent"
	}
	return "lobby agent"
}

// runOn runs the agents against the lobby (and the relay's node) that s
// names, printing each step.
func runOn(ctx context.Context, out io.Writer, s setup) (err error) {
	w := &syncWriter{w: out}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		shopperID = "shopper_B1" + s.suffix
		rogueID   = "rogue_007" + s.suffix
		wg        sync.WaitGroup
		clients   []*lobbyClient
	)
	defer func() {
		for _, c := range clients {
			c.close()
		}
		wg.Wait()
	}()
	dial := func(id string) (*lobbyClient, error) {
		c, err := dialLobby(ctx, s.lobbyURL, id)
		if err == nil {
			clients = append(clients, c)
		}
		return c, err
	}

	var mesh *node.Node
	if s.relayID != "" {
		if mesh, err = startMeshAgent(s, w); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, mesh.Close()) }()
		fmt.Fprintf(w, "mesh_hunter: mesh node %s offers %s, connected to the relay's node\n", mesh.AgentID(), capCheapest)
	}

	// §5.1: the hunters register.
	hunters := []*hunter{
		{site: "amazon.com", quote: quote{CheapestPrice: 108.8, Source: "DiscountDealz.com (mock)", URL: "http://mockdealz.com/Bose_QuietComfort"}},
		{quote: quote{CheapestPrice: 112.5, Source: "BargainBin.com (mock)", URL: "http://bargainbin.example/bose"}},
	}
	for i, h := range hunters {
		id := []string{"price_hunter_A2_v2", "price_hunter_C3_v1"}[i] + s.suffix
		if h.c, err = dial(id); err != nil {
			return err
		}
		h.out, h.allow = w, []string{shopperID}
		if err := h.c.register(ctx, h.capabilities()); err != nil {
			return err
		}
		var names []string
		for _, c := range h.capabilities() {
			names = append(names, c.Name)
		}
		fmt.Fprintf(w, "%s: REGISTER_ACK with a token; offers %s (%s only for %s)\n", id, strings.Join(names, ", "), capCheapest, shopperID)
		wg.Go(func() { h.serve(ctx) })
	}
	hunterA := hunters[0]
	shopper, err := dial(shopperID)
	if err != nil {
		return err
	}
	if err := shopper.register(ctx, nil); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: REGISTER_ACK with a token\n", shopperID)
	rogue, err := dial(rogueID)
	if err != nil {
		return err
	}
	if err := rogue.register(ctx, nil); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: REGISTER_ACK with a token\n", rogueID)

	// §5.2 and §5.3: the seed's search request, with an in_progress
	// RESPONSE before the final one.
	sa, err := shopper.discover(ctx, capSearch, "disc-1")
	if err != nil {
		return err
	}
	for _, f := range sa.ServicesFound {
		fmt.Fprintf(w, "%s: SERVICES_AVAILABLE %s: %s (%s)\n", shopperID, capSearch, f.AgentID, kind(f.AgentID))
	}
	if !slices.ContainsFunc(sa.ServicesFound, func(f lobby.ServiceFound) bool { return f.AgentID == hunterA.c.id }) {
		return fmt.Errorf("the lobby does not list %s for %s", hunterA.c.id, capSearch)
	}
	res, err := shopper.request(ctx, hunterA.c.id, capSearch, "conv-1",
		map[string]any{"item_to_find": item, "target_website": "amazon.com"},
		func(p json.RawMessage) { fmt.Fprintf(w, "%s: RESPONSE conv-1 in_progress: %s\n", shopperID, p) })
	if err != nil {
		return err
	}
	if res.status != "success" {
		return fmt.Errorf("%s: %s", capSearch, res.payload)
	}
	var sr searchResult
	if err := json.Unmarshal(res.payload, &sr); err != nil {
		return fmt.Errorf("%s result: %w", capSearch, err)
	}
	fmt.Fprintf(w, "%s: RESPONSE conv-1 success from %s: %q at %v on %s; cheapest anywhere %v at %s\n", shopperID, res.from,
		sr.ItemFoundOnSite.Name, sr.ItemFoundOnSite.RegularPrice, sr.ItemFoundOnSite.SourceWebsite,
		sr.CheapestPriceGlobally.CheapestPrice, sr.CheapestPriceGlobally.Source)

	// §5.2 again, for find_cheapest_item_price_v2: both hunters, and the
	// mesh agent once the mesh directory has its record.
	want := []string{hunters[0].c.id, hunters[1].c.id}
	if mesh != nil {
		want = append(want, mesh.AgentID())
	}
	attempt := 1
	err = poll(ctx, "every "+capCheapest+" provider in SERVICES_AVAILABLE", 100*time.Millisecond, func() (bool, error) {
		attempt++
		sa, err = shopper.discover(ctx, capCheapest, fmt.Sprintf("disc-%d", attempt))
		if err != nil {
			return false, err
		}
		for _, id := range want {
			if !slices.ContainsFunc(sa.ServicesFound, func(f lobby.ServiceFound) bool { return f.AgentID == id }) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, f := range sa.ServicesFound {
		fmt.Fprintf(w, "%s: SERVICES_AVAILABLE %s: %s (%s)\n", shopperID, capCheapest, f.AgentID, kind(f.AgentID))
	}

	// §5.3: the shopper asks each provider, a mesh agent through the
	// lobby like the others, and takes the cheapest.
	var best *quote
	var bestFrom string
	for i, f := range sa.ServicesFound {
		conv := fmt.Sprintf("conv-%d", i+2)
		res, err := shopper.request(ctx, f.AgentID, capCheapest, conv, map[string]any{"item_name": item}, nil)
		if err != nil {
			return err
		}
		if res.status != "success" {
			fmt.Fprintf(w, "%s: RESPONSE %s %s from %s: %s\n", shopperID, conv, res.status, res.from, res.payload)
			continue
		}
		var q quote
		if err := json.Unmarshal(res.payload, &q); err != nil {
			return fmt.Errorf("%s result from %s: %w", capCheapest, f.AgentID, err)
		}
		fmt.Fprintf(w, "%s: RESPONSE %s success from %s: %v at %s\n", shopperID, conv, res.from, q.CheapestPrice, q.Source)
		if best == nil || q.CheapestPrice < best.CheapestPrice {
			best, bestFrom = &q, f.AgentID
		}
	}
	if best == nil {
		return errors.New("no provider quoted a price")
	}
	fmt.Fprintf(w, "%s: cheapest: %v at %s, from %s (%s)\n", shopperID, best.CheapestPrice, best.Source, bestFrom, kind(bestFrom))

	// §5.3's authorization check: the lobby refuses rogue_007 and the
	// hunter never hears of it.
	res, err = rogue.request(ctx, hunterA.c.id, capCheapest, "conv-r1", map[string]any{"item_name": item}, nil)
	if err != nil {
		return err
	}
	var refusal lobby.ErrorResponse
	if err := json.Unmarshal(res.payload, &refusal); err != nil {
		return fmt.Errorf("rogue's RESPONSE: %w", err)
	}
	if res.status != "error" {
		return fmt.Errorf("the lobby let %s call %s: %s", rogueID, capCheapest, res.payload)
	}
	fmt.Fprintf(w, "%s: RESPONSE conv-r1 error from %s: %s: %s\n", rogueID, res.from, refusal.Code, refusal.Error)

	// §4.7 and §6: a bad token is answered with ERROR.
	rogue.token = "not-" + rogue.token
	_, err = rogue.discover(ctx, capSearch, "disc-r1")
	var le *lobbyErr
	if !errors.As(err, &le) {
		return fmt.Errorf("DISCOVER_SERVICES with a bad token: want ERROR, got %v", err)
	}
	fmt.Fprintf(w, "%s: DISCOVER_SERVICES with a bad token: %v\n", rogueID, le)
	impostor, err := dial(shopperID)
	if err != nil {
		return err
	}
	impostor.token = "forged-token"
	_, err = impostor.request(ctx, hunterA.c.id, capCheapest, "conv-x1", map[string]any{"item_name": item}, nil)
	if !errors.As(err, &le) {
		return fmt.Errorf("REQUEST with a forged token: want ERROR, got %v", err)
	}
	fmt.Fprintf(w, "impostor as %s: REQUEST with a forged token: %v\n", shopperID, le)

	// The mesh side: the relay offers its lobby agents' capabilities as
	// its node's own; a mesh node finds one in the directory and calls it.
	if mesh != nil {
		if err := meshSide(ctx, w, s, mesh); err != nil {
			return err
		}
	}

	// What the lobby refused never reached a hunter (§5.3: "Processing
	// stops").
	refused := func(r seenRequest) bool {
		return r.from == rogueID || r.conv == "conv-x1" || (mesh != nil && r.from == mesh.AgentID() && r.capability == capCheapest)
	}
	for _, h := range hunters {
		if r, ok := h.received(refused); ok {
			return fmt.Errorf("%s received a REQUEST the lobby should have refused: %s from %s (%s)", h.c.id, r.capability, r.from, r.conv)
		}
	}
	fmt.Fprintln(w, "no hunter received a refused REQUEST")
	return nil
}

// meshSide runs the mesh node's part: it discovers initiate_item_search_v2
// in the mesh directory, finds the relay offering it, and calls it (the
// relay forwards the call to the lobby agent), then is refused
// find_cheapest_item_price_v2, which only the shopper may call.
func meshSide(ctx context.Context, w io.Writer, s setup, mesh *node.Node) error {
	var found protocol.PeerInfo
	err := poll(ctx, "the relay offering "+capSearch+" in the mesh directory", 100*time.Millisecond, func() (bool, error) {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		ch, err := mesh.Discover(dctx, capSearch, false)
		if err != nil {
			return false, fmt.Errorf("mesh discover: %w", err)
		}
		ok := false
		for pi := range ch {
			if pi.AgentID == s.relayID.String() {
				found, ok = pi, true
				cancel()
			}
		}
		return ok, nil
	})
	if err != nil {
		return err
	}
	for _, c := range found.Capabilities {
		fmt.Fprintf(w, "mesh_hunter: directory: %s offered by %s (the relay): %s\n", c.Name, found.AgentID, c.Description)
	}
	resp, err := mesh.Call(ctx, protocol.CallRequest{To: s.relayID.String(), Action: capSearch,
		Params: mustJSON(map[string]string{"item_to_find": item, "target_website": "bestbuy.com"})})
	if err != nil {
		return fmt.Errorf("mesh call %s: %w", capSearch, err)
	}
	var sr searchResult
	if err := json.Unmarshal(resp.Result, &sr); err != nil {
		return fmt.Errorf("%s result: %w", capSearch, err)
	}
	fmt.Fprintf(w, "mesh_hunter: %s through the relay: %q at %v on %s; cheapest anywhere %v at %s\n", capSearch,
		sr.ItemFoundOnSite.Name, sr.ItemFoundOnSite.RegularPrice, sr.ItemFoundOnSite.SourceWebsite,
		sr.CheapestPriceGlobally.CheapestPrice, sr.CheapestPriceGlobally.Source)
	_, err = mesh.Call(ctx, protocol.CallRequest{To: s.relayID.String(), Action: capCheapest, Params: mustJSON(map[string]string{"item_name": item})})
	if protocol.CodeOf(err) != protocol.CodeUnauthorized {
		return fmt.Errorf("mesh call %s: want UNAUTHORIZED, got %v", capCheapest, err)
	}
	fmt.Fprintf(w, "mesh_hunter: %s through the relay: %v\n", capCheapest, err)
	return nil
}
