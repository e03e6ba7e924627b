package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/lobby"
)

// e2eLobbyClient is a seed 000 agent on a relay's lobby.
type e2eLobbyClient struct {
	t     *testing.T
	ws    *websocket.Conn
	id    string
	token string
}

func dialE2ELobby(t *testing.T, url, id string) *e2eLobbyClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.CloseNow() })
	c := &e2eLobbyClient{t: t, ws: ws, id: id}
	ack := c.roundTrip(lobby.TypeRegister, lobby.DefaultID, "", map[string]any{"capabilities": []any{}})
	var p lobby.RegisterAckPayload
	if err := json.Unmarshal(ack.Payload, &p); ack.MessageType != lobby.TypeRegisterAck || err != nil {
		t.Fatalf("%s: REGISTER answered %s %s", id, ack.MessageType, ack.Payload)
	}
	c.token = p.AuthToken
	return c
}

// roundTrip sends one message and returns the next one received.
func (c *e2eLobbyClient) roundTrip(typ, to, conv string, payload any) lobby.Message {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, _ := json.Marshal(payload)
	b, _ := json.Marshal(lobby.Message{SenderID: c.id, ReceiverID: to, MessageType: typ, Payload: p, ConversationID: conv, AuthToken: c.token})
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		c.t.Fatal(err)
	}
	_, data, err := c.ws.Read(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	var m lobby.Message
	if err := json.Unmarshal(data, &m); err != nil {
		c.t.Fatalf("%s received %s: %v", c.id, data, err)
	}
	return m
}

// request sends a REQUEST and returns the final RESPONSE's payload.
func (c *e2eLobbyClient) request(to, capability, conv string) map[string]any {
	c.t.Helper()
	m := c.roundTrip(lobby.TypeRequest, to, conv, map[string]any{"capability_name": capability})
	var p map[string]any
	if err := json.Unmarshal(m.Payload, &p); m.MessageType != lobby.TypeResponse || err != nil {
		c.t.Fatalf("%s: REQUEST %s answered %s %s", c.id, capability, m.MessageType, m.Payload)
	}
	return p
}

// TestRelayVouchesForLobbyClients: a mesh agent authorizes one lobby
// client of a relay ("<relay>/lobby:alice") and limits the relay's lobby
// clients each on its own ("<relay>/lobby:*"): alice's REQUEST through the
// relay runs, with the handler seeing the relay (MESHAGENT_REQUESTER) and
// alice (MESHAGENT_ON_BEHALF_OF); bob's is
// refused UNAUTHORIZED; the rate limit counts per client.
func TestRelayVouchesForLobbyClients(t *testing.T) {
	dir := t.TempDir()
	rl := startCommand(t, "relay", "relay", "--data", filepath.Join(dir, "relay"), "--ws", "127.0.0.1:0")
	r := rl.started.AgentID
	caps := filepath.Join(dir, "caps.json")
	who := map[string]any{"exec": []string{"sh", "-c", `printf '{"requester":"%s","onBehalfOf":"%s"}' "$MESHAGENT_REQUESTER" "$MESHAGENT_ON_BEHALF_OF"`}}
	capsJSON, _ := json.Marshal([]map[string]any{
		{"name": "vip_quote", "authorized_requester_ids": []string{r + "/lobby:alice"}, "handler": who},
		{"name": "open_quote", "handler": who},
	})
	writeFile(t, caps, string(capsJSON))
	policy := filepath.Join(dir, "policy.json")
	writeFile(t, policy, `{"rules":[{"name":"lobby agents","agents":["`+r+`/lobby:*"],"rate_limit":"2/minute"}]}`)
	provider := startNode(t, "provider", "--data", filepath.Join(dir, "provider"), "--bootstrap", rl.started.Addrs[0],
		"--capabilities", caps, "--policy", policy)
	p := provider.started.AgentID

	lobbyURL := "ws://" + rl.started.WS + "/lobby"
	alice, bob := dialE2ELobby(t, lobbyURL, "alice"), dialE2ELobby(t, lobbyURL, "bob")
	// Until the relay's node knows the provider, the mesh call cannot be
	// made (and costs no token at the provider).
	var first map[string]any
	wait.For(t, 30*time.Second, func() error {
		first = alice.request(p, "vip_quote", "a1")
		if first["status"] != "success" {
			return fmt.Errorf("alice's first REQUEST: %v", first)
		}
		return nil
	})
	if first["requester"] != r || first["onBehalfOf"] != "lobby:alice" {
		t.Errorf("the handler saw %v", first)
	}
	if res := bob.request(p, "vip_quote", "b1"); res["status"] != "error" || res["code"] != "UNAUTHORIZED" ||
		!strings.Contains(fmt.Sprint(res["error"]), r+"/lobby:bob is not authorized") {
		t.Errorf("bob's REQUEST for vip_quote: %v", res)
	}
	// Two a minute per lobby agent: alice has used one, bob one.
	if res := alice.request(p, "open_quote", "a2"); res["status"] != "success" {
		t.Errorf("alice's second REQUEST: %v", res)
	}
	if res := alice.request(p, "open_quote", "a3"); res["status"] != "error" || res["code"] != "RATE_LIMITED" {
		t.Errorf("alice's third REQUEST: %v", res)
	}
	if res := bob.request(p, "open_quote", "b2"); res["status"] != "success" || res["onBehalfOf"] != "lobby:bob" {
		t.Errorf("bob's second REQUEST: %v", res)
	}
	provider.stop(t, 20*time.Second)
	rl.stop(t, 20*time.Second)
}
