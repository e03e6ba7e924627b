package lobby_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
)

// dialClient dials tl as id with a Client and closes it at the end.
func dialClient(t *testing.T, tl *testLobby, id string, opts ...lobby.ClientOption) *lobby.Client {
	t.Helper()
	c, err := lobby.Dial(ctxT(t), tl.url, id, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// serveHunter answers each REQUEST h receives with a RESPONSE in progress
// and a final one, until its connection closes.
func serveHunter(ctx context.Context, h *lobby.Client) {
	for {
		m, err := h.Recv(ctx)
		if err != nil {
			return
		}
		if m.MessageType != lobby.TypeRequest {
			continue
		}
		for _, status := range []string{"in_progress", "success"} {
			_ = h.Send(ctx, m.SenderID, lobby.TypeResponse, m.ConversationID, map[string]any{"status": status, "cheapest_price": 99.9})
		}
	}
}

// TestClient drives a lobby with Clients: each row is one Ask and the
// message types and error code its answers must have.
func TestClient(t *testing.T) {
	tl := newTestLobby(t)
	ctx := ctxT(t)
	hunter := dialClient(t, tl, "hunter")
	if err := hunter.Register(ctx, searchCap("shopper")); err != nil {
		t.Fatal(err)
	}
	if hunter.Token() == "" || hunter.ID() != "hunter" {
		t.Fatalf("registered hunter: id %q, token %q", hunter.ID(), hunter.Token())
	}
	var served sync.WaitGroup
	served.Go(func() { serveHunter(ctx, hunter) })
	defer func() { _ = hunter.Close(); served.Wait() }()
	shopper, rogue := dialClient(t, tl, "shopper"), dialClient(t, tl, "rogue")
	for _, c := range []*lobby.Client{shopper, rogue} {
		if err := c.Register(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A second connection sending the shopper's token re-attaches to it;
	// one with a forged token is refused.
	again := dialClient(t, tl, "shopper", lobby.WithClientToken(shopper.Token()))
	forged := dialClient(t, tl, "shopper", lobby.WithClientToken("forged-token"))

	price := map[string]any{"capability_name": "find_cheapest_item_price_v2", "item_name": "headphones"}
	for _, tc := range []struct {
		name      string
		c         *lobby.Client
		to, typ   string
		conv      string
		payload   any
		wantTypes []string
		wantCode  protocol.Code // of the last answer, if any
	}{
		{"discover", shopper, lobby.DefaultID, lobby.TypeDiscoverServices, "d1",
			lobby.DiscoverServicesPayload{CapabilityName: "find_cheapest_item_price_v2"}, []string{lobby.TypeServicesAvailable}, ""},
		{"discover nothing", shopper, lobby.DefaultID, lobby.TypeDiscoverServices, "d2",
			lobby.DiscoverServicesPayload{}, []string{lobby.TypeError}, protocol.CodeInvalidMessage},
		{"request with progress", shopper, "hunter", lobby.TypeRequest, "c1", price,
			[]string{lobby.TypeResponse, lobby.TypeResponse}, ""},
		{"re-attached by token", again, "hunter", lobby.TypeRequest, "c2", price,
			[]string{lobby.TypeResponse, lobby.TypeResponse}, ""},
		{"not authorized", rogue, "hunter", lobby.TypeRequest, "c3", price,
			[]string{lobby.TypeResponse}, protocol.CodeUnauthorized},
		{"forged token", forged, "hunter", lobby.TypeRequest, "c4", price,
			[]string{lobby.TypeError}, protocol.CodeUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := tc.c.Ask(ctx, tc.to, tc.typ, tc.conv, tc.payload)
			if err != nil {
				t.Fatal(err)
			}
			var types []string
			for _, m := range ms {
				types = append(types, m.MessageType)
			}
			if !slices.Equal(types, tc.wantTypes) {
				t.Fatalf("answers %v, want %v", types, tc.wantTypes)
			}
			var last struct {
				Status string        `json:"status"`
				Code   protocol.Code `json:"code"`
			}
			if err := json.Unmarshal(ms[len(ms)-1].Payload, &last); err != nil {
				t.Fatal(err)
			}
			if last.Code != tc.wantCode {
				t.Errorf("last answer %s, want code %q", ms[len(ms)-1].Payload, tc.wantCode)
			}
			if len(ms) == 2 && last.Status != "success" {
				t.Errorf("final RESPONSE %s, want status success", ms[1].Payload)
			}
		})
	}
}

// TestClientRegisterRefused: a taken agent_id is refused, as an error
// wrapping ErrRegisterRefused and the ERROR's code.
func TestClientRegisterRefused(t *testing.T) {
	tl := newTestLobby(t)
	ctx := ctxT(t)
	if err := dialClient(t, tl, "shopper").Register(ctx); err != nil {
		t.Fatal(err)
	}
	err := dialClient(t, tl, "shopper").Register(ctx)
	var pe *protocol.Error
	if !errors.Is(err, lobby.ErrRegisterRefused) || !errors.As(err, &pe) || pe.Code == "" {
		t.Fatalf("second REGISTER of shopper: %v, want ErrRegisterRefused with a code", err)
	}
}

// TestClientDiscover: Discover returns SERVICES_AVAILABLE's payload, the
// lobby's agents then the mesh's, and a refused query as its code.
func TestClientDiscover(t *testing.T) {
	tl := newTestLobby(t)
	ctx := ctxT(t)
	hunter, shopper := dialClient(t, tl, "hunter"), dialClient(t, tl, "shopper")
	for _, c := range []*lobby.Client{hunter, shopper} {
		if err := c.Register(ctx, searchCap()); err != nil {
			t.Fatal(err)
		}
	}
	sa, err := shopper.Discover(ctx, lobby.DiscoverServicesPayload{CapabilityName: "find_cheapest_item_price_v2"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, f := range sa.ServicesFound {
		ids = append(ids, f.AgentID)
	}
	if !slices.Equal(ids, []string{"hunter", peerID}) || sa.DiscoveredForCapability != "find_cheapest_item_price_v2" {
		t.Errorf("found %v for %q, want hunter then the mesh peer", ids, sa.DiscoveredForCapability)
	}
	_, err = shopper.Discover(ctx, lobby.DiscoverServicesPayload{})
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidMessage {
		t.Errorf("empty query: %v, want INVALID_MESSAGE", err)
	}
}

// TestClientAskBounded checks that a lobby answering one message with
// endless progress ends the Ask at MaxAskAnswers instead of growing it.
func TestClientAskBounded(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		_, b, err := ws.Read(r.Context())
		if err != nil {
			return
		}
		m, err := lobby.ParseMessage(b)
		if err != nil {
			return
		}
		progress, _ := json.Marshal(lobby.Message{SenderID: "hunter", ReceiverID: m.SenderID, MessageType: lobby.TypeResponse,
			ConversationID: m.ConversationID, Payload: json.RawMessage(`{"status":"in_progress"}`)})
		for range lobby.MaxAskAnswers + 1 {
			if ws.Write(r.Context(), websocket.MessageText, progress) != nil {
				return
			}
		}
		_, _, _ = ws.Read(context.Background()) // until the client hangs up
	}))
	defer srv.Close()
	c, err := lobby.Dial(ctxT(t), "ws"+strings.TrimPrefix(srv.URL, "http"), "shopper")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ms, err := c.Ask(ctxT(t), "hunter", lobby.TypeRequest, "conv-1", map[string]any{"q": 1})
	if !errors.Is(err, lobby.ErrTooManyAnswers) || len(ms) != lobby.MaxAskAnswers {
		t.Fatalf("Ask = %d answers, %v; want %d, ErrTooManyAnswers", len(ms), err, lobby.MaxAskAnswers)
	}
}

// TestClientReadLimit: a Client reads messages up to its read limit
// (WithClientReadLimit); a bigger one ends its connection with an error
// rather than being read. The same answer reaches a Client with the
// default limit.
func TestClientReadLimit(t *testing.T) {
	tl := newTestLobby(t)
	ctx := ctxT(t)
	hunter := dialClient(t, tl, "hunter")
	big := searchCap()
	big.Description = strings.Repeat("d", 4096)
	if err := hunter.Register(ctx, big); err != nil {
		t.Fatal(err)
	}
	discover := lobby.DiscoverServicesPayload{CapabilityName: big.Name}
	for _, tc := range []struct {
		id      string
		opts    []lobby.ClientOption
		wantErr bool
	}{
		{"roomy", nil, false},
		{"narrow", []lobby.ClientOption{lobby.WithClientReadLimit(1024)}, true},
	} {
		c := dialClient(t, tl, tc.id, tc.opts...)
		if err := c.Register(ctx); err != nil {
			t.Fatal(err)
		}
		ms, err := c.Ask(ctx, lobby.DefaultID, lobby.TypeDiscoverServices, "d-"+tc.id, discover)
		switch {
		case tc.wantErr && err == nil:
			t.Errorf("%s: read a %d-byte answer past a 1 KiB limit", tc.id, len(ms[0].Payload))
		case !tc.wantErr && (err != nil || len(ms) != 1 || ms[0].MessageType != lobby.TypeServicesAvailable):
			t.Errorf("%s: %v %+v", tc.id, err, ms)
		}
	}
}
