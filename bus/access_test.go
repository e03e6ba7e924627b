package bus_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/rpc"
)

// Tokens of the tests' tokens file.
const (
	adminToken  = "admin-token-0123456789"
	bridgeToken = "bridge-token-0123456789"
	meshToken   = "mesh-token-0123456789"
)

const testTokens = `{"tokens": [
  {"name": "ops", "token": "` + adminToken + `", "methods": ["admin"]},
  {"name": "bridge", "token": "` + bridgeToken + `", "topics": ["inbound:*", "agent:"]},
  {"name": "caller", "token": "` + meshToken + `", "methods": ["mesh.*"]}
]}`

// listeners is one server (one bus, with a store) on a loopback-style
// local listener and a public one, the public one behind tokens if any.
type listeners struct {
	srv           *rpctest.Stack
	local, public string
	tokens        *rpc.Tokens
	tokensFile    string
}

func serveListeners(t *testing.T, tokens string) *listeners {
	t.Helper()
	st := openStore(t, filepath.Join(t.TempDir(), "store.db"))
	srv, err := newStack(t, fakemesh.New(), rpctest.WithBus(fastBus(), bus.WithStore(st)))
	if err != nil {
		t.Fatal(err)
	}
	l := &listeners{srv: srv}
	pub := srv.PublicHandler()
	if tokens != "" {
		l.tokensFile = filepath.Join(t.TempDir(), "tokens.json")
		writeTestFile(t, l.tokensFile, tokens)
		if l.tokens, err = rpc.LoadTokens(l.tokensFile); err != nil {
			t.Fatal(err)
		}
		pub = l.tokens.Middleware(pub)
	}
	local, public := httptest.NewServer(srv), httptest.NewServer(pub)
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		local.Close()
		public.Close()
	})
	l.local, l.public = "ws"+strings.TrimPrefix(local.URL, "http")+"/", "ws"+strings.TrimPrefix(public.URL, "http")+"/"
	return l
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func withToken(url, token string) string { return url + "?token=" + token }

// TestPublicListenerRules: an anonymous client of the public listener may
// use the bus, but not the admin methods, mesh.* or a mesh call through
// agent:<id>; the local listener of the same server serves all of them.
func TestPublicListenerRules(t *testing.T) {
	l := serveListeners(t, "")
	anon := dialClient(t, l.public)
	local := dialClient(t, l.local)
	calls := []struct {
		method string
		params any
	}{
		{bus.MethodBusHistory, nil},
		{bus.MethodBusDeadLetters, nil},
		{bus.MethodBusReplay, map[string]string{"id": "nope"}},
		{rpc.MethodMeshID, nil},
		{rpc.MethodMeshPeers, nil},
		{rpc.MethodMeshCall, map[string]any{"agentId": peerID, "capability": "echo"}},
		{rpc.MethodMeshPublish, map[string]any{"topic": "news:1", "payload": map[string]string{}}},
	}
	for _, c := range calls {
		err := anon.Call(ctxT(t), c.method, c.params, nil)
		if rpcCode(err) != rpc.CodeForbidden || !strings.Contains(err.Error(), "anonymous") {
			t.Errorf("anonymous public %s: %v, want -32020", c.method, err)
		}
		if err := local.Call(ctxT(t), c.method, c.params, nil); rpcCode(err) == rpc.CodeForbidden {
			t.Errorf("local %s: %v", c.method, err)
		}
	}
	err := anon.Call(ctxT(t), bus.MethodSendMessage, map[string]any{"topic": "agent:" + peerID, "payload": map[string]string{"type": "echo"}}, nil)
	if rpcCode(err) != rpc.CodeForbidden {
		t.Errorf("anonymous sendMessage to a mesh agent: %v, want -32020", err)
	}
	// The bus itself is open to anonymous clients.
	sub := newPeer(t, l.public, "anon-sub", nil)
	if err := sub.Call(ctxT(t), bus.MethodSubscribe, map[string]string{"topic": "inbound:*"}, nil); err != nil {
		t.Fatal(err)
	}
	var res bus.SendResult
	if err := anon.Call(ctxT(t), bus.MethodSendMessage, map[string]any{"topic": "inbound:1", "payload": map[string]string{"type": "plaintext_message", "text": "hi"}}, &res); err != nil || !res.Success {
		t.Fatalf("anonymous sendMessage: %+v %v", res, err)
	}
	if err := anon.Call(ctxT(t), rpc.MethodPing, nil, nil); err != nil {
		t.Errorf("anonymous ping: %v", err)
	}
}

// TestInitializeFirst: on every listener nothing but initialize is
// answered before initialize (seed 001), then everything is.
func TestInitializeFirst(t *testing.T) {
	l := serveListeners(t, "")
	for _, url := range []string{l.local, l.public} {
		c := dialClient(t, url, rpc.WithoutInitialize())
		for _, m := range []string{rpc.MethodPing, rpc.MethodMeshID, rpc.MethodMeshPeers, bus.MethodBusHistory, bus.MethodSubscribe} {
			if err := c.Call(ctxT(t), m, nil, nil); rpcCode(err) != rpc.CodeNotInitialized {
				t.Errorf("%s %s before initialize: %v, want -32006", url, m, err)
			}
		}
		if err := c.Call(ctxT(t), rpc.MethodInitialize, rpc.InitializeParams{ClientID: "first-" + url, ClientInfo: rpc.ClientInfo{Name: "t"}}, nil); err != nil {
			t.Fatal(err)
		}
		if err := c.Call(ctxT(t), rpc.MethodPing, nil, nil); err != nil {
			t.Errorf("ping after initialize: %v", err)
		}
	}
	// Dial initializes by itself.
	c := dialClient(t, l.local, rpc.WithClientID("auto"))
	var id rpc.IDResult
	if err := c.Call(ctxT(t), rpc.MethodMeshID, nil, &id); err != nil || id.AgentID != selfID {
		t.Errorf("mesh.id after Dial: %+v %v", id, err)
	}
	if c.ClientID() != "auto" || c.ServerID() != selfID {
		t.Errorf("ClientID %q ServerID %q", c.ClientID(), c.ServerID())
	}
}

// TestTokens: with tokens, the public listener refuses an upgrade without
// a valid one (401), takes it in the URL or a header, and grants each
// credential its methods and topics.
func TestTokens(t *testing.T) {
	l := serveListeners(t, testTokens)
	for name, h := range map[string]http.Header{
		"no token":       nil,
		"wrong token":    {"Authorization": {"Bearer wrong-token-0123456789"}},
		"not bearer":     {"Authorization": {"Basic " + adminToken}},
		"header and url": {"Authorization": {"Bearer " + bridgeToken}},
	} {
		url := l.public
		if name == "header and url" {
			url = withToken(url, adminToken)
		}
		ws, resp, err := websocket.Dial(ctxT(t), url, &websocket.DialOptions{HTTPHeader: h})
		if err == nil {
			_ = ws.CloseNow()
		}
		if resp == nil || resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: %v %v, want 401 with WWW-Authenticate", name, resp, err)
		}
	}
	ops := dialClient(t, withToken(l.public, adminToken))
	bridge := dialClient(t, l.public, rpc.WithHTTPHeader(http.Header{"Authorization": {"Bearer " + bridgeToken}}))
	caller := dialClient(t, withToken(l.public, meshToken))

	t.Run("methods", func(t *testing.T) {
		if err := ops.Call(ctxT(t), bus.MethodBusDeadLetters, nil, nil); err != nil {
			t.Errorf("ops bus.deadLetters: %v", err)
		}
		if err := ops.Call(ctxT(t), rpc.MethodMeshID, nil, nil); rpcCode(err) != rpc.CodeForbidden || !strings.Contains(err.Error(), `"ops"`) {
			t.Errorf("ops mesh.id: %v, want -32020 naming the credential", err)
		}
		if err := bridge.Call(ctxT(t), bus.MethodBusHistory, nil, nil); rpcCode(err) != rpc.CodeForbidden {
			t.Errorf("bridge bus.history: %v, want -32020", err)
		}
		var res map[string]any
		if err := caller.Call(ctxT(t), rpc.MethodMeshCall, map[string]any{"agentId": peerID, "capability": "echo"}, &res); err != nil {
			t.Errorf("caller mesh.call: %v", err)
		}
		if err := caller.Call(ctxT(t), bus.MethodBusHistory, nil, nil); rpcCode(err) != rpc.CodeForbidden {
			t.Errorf("caller bus.history: %v, want -32020", err)
		}
	})
	t.Run("topics", func(t *testing.T) {
		send := func(topic string) error {
			return bridge.Call(ctxT(t), bus.MethodSendMessage, map[string]any{"topic": topic, "payload": map[string]string{"type": "plaintext_message", "text": "x"}}, nil)
		}
		if err := send("inbound:1"); err != nil {
			t.Errorf("bridge sendMessage inbound:1: %v", err)
		}
		if err := send("outbound:1"); rpcCode(err) != rpc.CodeForbidden {
			t.Errorf("bridge sendMessage outbound:1: %v, want -32020", err)
		}
		// agent: is allowed, but a mesh call needs mesh.call.
		if err := send("agent:" + peerID); rpcCode(err) != rpc.CodeForbidden {
			t.Errorf("bridge sendMessage to a mesh agent: %v, want -32020", err)
		}
		for pattern, ok := range map[string]bool{
			"inbound:*":        true,
			"inbound:chat-*":   true,
			"inbound:chat-1":   true,
			"inbound:":         false, // matches inbound:a/b, which inbound:* does not
			"inbound:*/x":      false,
			"outbound:*":       false,
			"*":                false,
			"agent:me":         true,
			"agent:*":          true,
			"in*":              false,
			"inbound:[a-z]*":   true,
			`inbound\:*`:       false,
			"outbound:inbound": false,
		} {
			err := bridge.Call(ctxT(t), bus.MethodSubscribe, map[string]string{"topic": pattern}, nil)
			if got := err == nil; got != ok {
				t.Errorf("bridge subscribe %q: %v, want allowed=%v", pattern, err, ok)
			}
			if !ok && rpcCode(err) != rpc.CodeForbidden {
				t.Errorf("bridge subscribe %q: %v, want -32020", pattern, err)
			}
		}
	})
	t.Run("reload revokes", func(t *testing.T) {
		writeTestFile(t, l.tokensFile, `{"tokens": [{"name": "ops", "token": "`+adminToken+`", "methods": ["admin", "mesh.id"]}]}`)
		if err := l.tokens.Reload(l.tokensFile); err != nil {
			t.Fatal(err)
		}
		if err := ops.Call(ctxT(t), rpc.MethodMeshID, nil, nil); err != nil {
			t.Errorf("ops mesh.id after its grant was added: %v", err)
		}
		// The connection is closed at once, its close frame saying why.
		if err := bridge.Call(ctxT(t), rpc.MethodPing, nil, nil); err == nil || !strings.Contains(err.Error(), "credential revoked") {
			t.Errorf("revoked bridge ping: %v, want the connection closed for a revoked credential", err)
		}
		select {
		case <-bridge.Done():
		case <-time.After(testTimeout):
			t.Error("the revoked connection was not closed")
		}
		if _, err := rpc.Dial(ctxT(t), withToken(l.public, bridgeToken)); err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("dial with a revoked token: %v, want 401", err)
		}
		// A file that does not load keeps the current tokens.
		writeTestFile(t, l.tokensFile, `{"tokens": [{"name": "ops", "token": "short"}]}`)
		if err := l.tokens.Reload(l.tokensFile); err == nil {
			t.Error("a bad tokens file reloaded")
		}
		if err := ops.Call(ctxT(t), bus.MethodBusHistory, nil, nil); err != nil {
			t.Errorf("ops after a failed reload: %v", err)
		}
	})
}

// TestClientIDInUse: a client id held by a live connection is refused to
// another one (-32001), unless both present the same credential, and is
// free again once its holder is gone.
func TestClientIDInUse(t *testing.T) {
	l := serveListeners(t, testTokens)
	local := dialClient(t, l.local, rpc.WithClientID("worker"))
	dial := func(url string) error {
		c, err := rpc.Dial(ctxT(t), url, rpc.WithClientID("worker"))
		if err == nil {
			t.Cleanup(func() { _ = c.Close() })
		}
		return err
	}
	var re *rpc.Error
	if err := dial(l.local); rpcCode(err) != rpc.CodeAlreadyInitialized || !errors.As(err, &re) || !strings.Contains(string(re.Data), "clientIdInUse") {
		t.Errorf("second local worker: %v, want -32001 clientIdInUse", err)
	}
	if err := dial(withToken(l.public, adminToken)); rpcCode(err) != rpc.CodeAlreadyInitialized {
		t.Errorf("public worker taking the local one's id: %v, want -32001", err)
	}
	_ = local.Close()
	wait.For(t, testTimeout, func() error { return dial(withToken(l.public, adminToken)) })
	// Now "worker" is held by ops: the same credential replaces it, another
	// one does not.
	if err := dial(withToken(l.public, bridgeToken)); rpcCode(err) != rpc.CodeAlreadyInitialized {
		t.Errorf("bridge taking ops' id: %v, want -32001", err)
	}
	first, err := rpc.Dial(ctxT(t), withToken(l.public, meshToken), rpc.WithClientID("caller-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := rpc.Dial(ctxT(t), withToken(l.public, meshToken), rpc.WithClientID("caller-1"))
	if err != nil {
		t.Fatalf("the same credential reconnecting: %v", err)
	}
	defer second.Close()
	select {
	case <-first.Done():
	case <-time.After(testTimeout):
		t.Error("the replaced connection is still open")
	}
	if err := second.Call(ctxT(t), rpc.MethodPing, nil, nil); err != nil {
		t.Errorf("the replacing connection: %v", err)
	}
}

// TestMeshCallVouchesForCredential: mesh.call from a public client
// authenticated by a credential vouches for it ("bus:<name>"); from the
// local API it does not (the node calls for itself).
func TestMeshCallVouchesForCredential(t *testing.T) {
	l := serveListeners(t, testTokens)
	for _, tc := range []struct{ url, want string }{
		{withToken(l.public, meshToken), "bus:caller"},
		{l.local, ""},
	} {
		c := dialClient(t, tc.url)
		var res struct {
			Result struct {
				OnBehalfOf string `json:"onBehalfOf"`
			} `json:"result"`
		}
		if err := c.Call(ctxT(t), rpc.MethodMeshCall, map[string]any{"agentId": peerID, "capability": "whoami"}, &res); err != nil {
			t.Fatal(err)
		}
		if res.Result.OnBehalfOf != tc.want {
			t.Errorf("%s: the mesh saw onBehalfOf %q, want %q", tc.url, res.Result.OnBehalfOf, tc.want)
		}
	}
}
