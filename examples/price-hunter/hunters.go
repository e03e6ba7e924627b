package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// The price hunters' side: the capabilities they register (§7) and how a
// lobby hunter serves its REQUESTs.

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

// meshHunter is mesh_hunter's find_cheapest_item_price_v2, offered to
// anyone; it prints each signed request it serves.
func meshHunter(out io.Writer) node.Service {
	return node.Service{Capability: cheapest(), Handler: node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
		fmt.Fprintf(out, "mesh_hunter: signed request from %s\n", c.From)
		return json.Marshal(quote{99.9, "MeshMart (mock)"})
	})}
}

// serve answers the hunter c's REQUESTs until its connection closes,
// printing each: the search with a RESPONSE in progress first (§4.6),
// the price with q.
func serve(ctx context.Context, out io.Writer, c *lobby.Client, q quote) {
	for {
		m, err := c.Recv(ctx)
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
		fmt.Fprintf(out, "%s: REQUEST %s from %s: %s\n", c.ID(), m.ConversationID, m.SenderID, p.Capability)
		answer := func(v any) { _ = c.Send(ctx, m.SenderID, lobby.TypeResponse, m.ConversationID, v) }
		if p.Capability == capSearch {
			answer(map[string]any{"status": "in_progress", "message": "searching " + p.Site})
			answer(map[string]any{"status": "success", "item_found_on_site": map[string]any{"regular_price": 128, "source_website": p.Site},
				"cheapest_price_globally": q, "message": "Search complete."})
		} else {
			answer(map[string]any{"status": "success", "cheapest_price": q.Price, "source": q.Source})
		}
	}
}
