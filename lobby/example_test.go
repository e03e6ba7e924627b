package lobby_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// exampleMesh stands in for a running node; the example calls no mesh
// agent.
type exampleMesh struct{}

func (exampleMesh) AgentID() string { return selfID }

func (exampleMesh) Call(_ context.Context, req protocol.CallRequest) (*protocol.Response, error) {
	return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "no capability %q", req.Action)
}

// exampleLobby is a lobby over a store in a temporary folder, and the
// function that closes the store and removes the folder.
func exampleLobby() (*lobby.Lobby, func()) {
	dir, err := os.MkdirTemp("", "lobby-example")
	if err != nil {
		panic(err)
	}
	st, err := store.Open(filepath.Join(dir, "store.db"))
	if err != nil {
		panic(err)
	}
	l, err := lobby.New(exampleMesh{}, st, lobby.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		panic(err)
	}
	return l, func() { _ = st.Close(); _ = os.RemoveAll(dir) }
}

// A relay mounts the lobby at /lobby; a seed 000 agent registers, and a
// mesh agent calls it through Serve (as the relay command's node handlers
// do).
func ExampleNew() {
	l, closeLobby := exampleLobby()
	defer closeLobby()
	mux := http.NewServeMux()
	mux.Handle("/lobby", l)
	hs := httptest.NewServer(mux)
	defer hs.Close()
	defer l.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/lobby", nil)
	if err != nil {
		panic(err)
	}
	defer ws.CloseNow()
	send := func(frame string) {
		if err := ws.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
			panic(err)
		}
	}
	recv := func() lobby.Message {
		_, b, err := ws.Read(ctx)
		if err != nil {
			panic(err)
		}
		var m lobby.Message
		if err := json.Unmarshal(b, &m); err != nil {
			panic(err)
		}
		return m
	}

	send(`{"sender_id":"price_hunter","receiver_id":"global_lobby","message_type":"REGISTER",
	       "payload":{"capabilities":[{"name":"find_price","authorized_requester_ids":["` + peerID + `"]}]},"auth_token":null}`)
	var ack lobby.RegisterAckPayload
	_ = json.Unmarshal(recv().Payload, &ack)
	fmt.Println("registered:", ack.Status, len(l.Capabilities()), "capability")

	// The agent answers each REQUEST with a RESPONSE (with its token).
	go func() {
		req := recv()
		send(`{"sender_id":"price_hunter","receiver_id":"` + req.SenderID + `","message_type":"RESPONSE",
		       "payload":{"status":"success","price":108.8},"conversation_id":"` + req.ConversationID + `","auth_token":"` + ack.AuthToken + `"}`)
	}()
	res, err := l.Serve(ctx, peerID, "find_price", json.RawMessage(`{"item":"headphones"}`))
	fmt.Println("from the mesh:", string(res), err)
	_, err = l.Serve(ctx, selfID, "find_price", nil)
	fmt.Println("not authorized:", err)
	// Output:
	// registered: success_registered_finalized 1 capability
	// from the mesh: {"price":108.8} <nil>
	// not authorized: UNAUTHORIZED: Unauthorized: Agent '12D3KooWNmhA9NDeN7QxmnSy3XCuggwjKdFUFur6oAez2Kaioh4a' is not authorized to call capability 'find_price' on agent 'price_hunter'.
}

// A Go lobby agent: a hunter registers a capability and serves it, and a
// shopper finds it and asks, reading the RESPONSE in progress and then the
// final one.
func ExampleClient() {
	l, closeLobby := exampleLobby()
	defer closeLobby()
	hs := httptest.NewServer(l)
	defer hs.Close()
	defer l.Close()
	url := "ws" + strings.TrimPrefix(hs.URL, "http") + "/lobby"

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	hunter, err := lobby.Dial(ctx, url, "price_hunter")
	if err != nil {
		panic(err)
	}
	defer hunter.Close()
	if err := hunter.Register(ctx, protocol.Capability{Name: "find_price", Description: "finds the cheapest price"}); err != nil {
		panic(err)
	}
	go func() { // the hunter answers one REQUEST: in progress, then done
		req, err := hunter.Recv(ctx)
		if err != nil {
			return
		}
		for _, status := range []string{"in_progress", "success"} {
			_ = hunter.Send(ctx, req.SenderID, lobby.TypeResponse, req.ConversationID, map[string]any{"status": status, "price": 108.8})
		}
	}()

	shopper, err := lobby.Dial(ctx, url, "shopper")
	if err != nil {
		panic(err)
	}
	defer shopper.Close()
	if err := shopper.Register(ctx); err != nil {
		panic(err)
	}
	sa, err := shopper.Discover(ctx, lobby.DiscoverServicesPayload{CapabilityName: "find_price"})
	if err != nil {
		panic(err)
	}
	fmt.Println("found:", sa.ServicesFound[0].AgentID)
	answers, err := shopper.Ask(ctx, "price_hunter", lobby.TypeRequest, "conv-1", map[string]any{"capability_name": "find_price"})
	if err != nil {
		panic(err)
	}
	for _, m := range answers {
		fmt.Println(m.MessageType, m.ConversationID, string(m.Payload))
	}
	// Output:
	// found: price_hunter
	// RESPONSE conv-1 {"price":108.8,"status":"in_progress"}
	// RESPONSE conv-1 {"price":108.8,"status":"success"}
}
