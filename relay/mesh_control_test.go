package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/relay"
)

// selfB64 is selfID's public key in base64.
const selfB64 = "wHiox8z1mK5g/OoPIWmnYlsiGfbCiF7RDi7yuHAzXM8="

// fakeControl records what the server asks of the operator's control.
type fakeControl struct {
	mu     sync.Mutex
	level  string
	dialed []string
}

func (*fakeControl) Addrs() []string {
	return []string{"/ip4/127.0.0.1/tcp/4001/p2p/" + selfID}
}

func (f *fakeControl) Connect(ctx context.Context, addr string) (string, error) {
	f.mu.Lock()
	f.dialed = append(f.dialed, addr)
	f.mu.Unlock()
	switch {
	case !strings.HasPrefix(addr, "/"):
		return "", fmt.Errorf("%w: %q is not a multiaddr", relay.ErrInvalidAddr, addr)
	case strings.Contains(addr, "/tcp/1/"):
		return "", protocol.Errorf(protocol.CodeUnknownAgent, "dial %s: connection refused", addr)
	}
	_, id, _ := strings.Cut(addr, "/p2p/")
	return id, nil
}

func (f *fakeControl) LogLevel() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.level
}

func (f *fakeControl) SetLogLevel(level string) error {
	switch level {
	case "debug", "info", "warn", "error":
	default:
		return fmt.Errorf("%q is not a level; use debug, info, warn or error", level)
	}
	f.mu.Lock()
	f.level = level
	f.mu.Unlock()
	return nil
}

// capsMesh is a fakeMesh serving capabilities of its own.
type capsMesh struct{ *fakeMesh }

func (capsMesh) Capabilities() []protocol.Capability {
	return []protocol.Capability{{Name: "echo"}, {Name: "translate"}}
}

func TestControlMethods(t *testing.T) {
	ctl := &fakeControl{level: "info"}
	mesh := newFakeMesh()
	ts := serveMesh(t, capsMesh{mesh}, mesh, relay.WithControl(ctl))
	c := dialClient(t, ts.url)
	ctx := context.Background()

	t.Run("id has the addresses", func(t *testing.T) {
		var res relay.IDResult
		if err := c.Call(ctx, relay.MethodMeshID, nil, &res); err != nil {
			t.Fatal(err)
		}
		if res.AgentID != selfID || res.PublicKey != selfB64 || len(res.Addrs) != 1 || !strings.HasSuffix(res.Addrs[0], "/p2p/"+selfID) {
			t.Fatalf("mesh.id = %+v", res)
		}
	})

	t.Run("connect", func(t *testing.T) {
		addr := "/ip4/127.0.0.1/tcp/4001/p2p/" + peerID
		var res relay.ConnectResult
		if err := c.Call(ctx, relay.MethodMeshConnect, relay.ConnectParams{Addr: addr}, &res); err != nil {
			t.Fatal(err)
		}
		if res.AgentID != peerID || res.Addr != addr {
			t.Fatalf("mesh.connect = %+v", res)
		}
	})

	connectErrors := []struct {
		name     string
		params   any
		wantCode int
		wantMsg  string
	}{
		{"no addr", map[string]any{}, relay.CodeInvalidParams, `"addr" is required`},
		{"addr not a string", map[string]any{"addr": 7}, relay.CodeInvalidParams, `"addr" must be a string`},
		{"unknown field", map[string]any{"addr": "/ip4/1.2.3.4", "port": 1}, relay.CodeInvalidParams, `unknown field "port"`},
		{"not a multiaddr", relay.ConnectParams{Addr: "example.com:4001"}, relay.CodeInvalidParams, "not a multiaddr"},
		{"too long", relay.ConnectParams{Addr: "/" + strings.Repeat("a", 2000)}, relay.CodeInvalidParams, "longer than"},
		{"negative timeout", map[string]any{"addr": "/ip4/1.2.3.4", "timeoutMs": -1}, relay.CodeInvalidParams, `"timeoutMs"`},
		{"string timeout", map[string]any{"addr": "/ip4/1.2.3.4", "timeoutMs": "5s"}, relay.CodeInvalidParams, `"timeoutMs"`},
		{"unreachable", relay.ConnectParams{Addr: "/ip4/127.0.0.1/tcp/1/p2p/" + peerID}, relay.CodeMeshUnknownAgent, "connection refused"},
	}
	for _, tc := range connectErrors {
		t.Run("connect "+tc.name, func(t *testing.T) {
			err := c.Call(ctx, relay.MethodMeshConnect, tc.params, nil)
			var re *relay.RPCError
			if !errors.As(err, &re) || re.Code != tc.wantCode || !strings.Contains(re.Message, tc.wantMsg) {
				t.Fatalf("err = %v; want code %d with %q", err, tc.wantCode, tc.wantMsg)
			}
		})
	}

	t.Run("log level", func(t *testing.T) {
		var res relay.LogLevelResult
		if err := c.Call(ctx, relay.MethodMeshLogLevel, nil, &res); err != nil || res.Level != "info" || res.Previous != "info" {
			t.Fatalf("read: %+v, %v", res, err)
		}
		if err := c.Call(ctx, relay.MethodMeshLogLevel, relay.LogLevelParams{Level: "debug"}, &res); err != nil {
			t.Fatal(err)
		}
		if res.Previous != "info" || res.Level != "debug" || ctl.LogLevel() != "debug" {
			t.Fatalf("set: %+v, control at %s", res, ctl.LogLevel())
		}
		for _, bad := range []any{map[string]any{"level": "loud"}, map[string]any{"level": 3}, map[string]any{"lvl": "info"}, []string{"info"}} {
			err := c.Call(ctx, relay.MethodMeshLogLevel, bad, nil)
			var re *relay.RPCError
			if !errors.As(err, &re) || re.Code != relay.CodeInvalidParams {
				t.Errorf("params %v: err = %v; want invalid params", bad, err)
			}
		}
		if ctl.LogLevel() != "debug" {
			t.Fatalf("a refused level changed the level to %s", ctl.LogLevel())
		}
	})

	t.Run("status", func(t *testing.T) {
		sub := dialClient(t, ts.url)
		if err := sub.Call(ctx, relay.MethodInitialize, map[string]any{"clientId": "watcher", "clientInfo": map[string]string{"name": "watcher", "version": "1"}}, nil); err != nil {
			t.Fatal(err)
		}
		if err := sub.Call(ctx, relay.MethodSubscribe, map[string]any{"topic": "inbound:*"}, nil); err != nil {
			t.Fatal(err)
		}
		var raw json.RawMessage
		if err := c.Call(ctx, relay.MethodMeshStatus, nil, &raw); err != nil {
			t.Fatal(err)
		}
		var res relay.StatusResult
		if err := json.Unmarshal(raw, &res); err != nil {
			t.Fatal(err)
		}
		if res.AgentID != selfID || res.PublicKey != selfB64 || len(res.Addrs) != 1 || res.LogLevel != "debug" {
			t.Errorf("identity: %s", raw)
		}
		if strings.Join(res.Capabilities, ",") != "echo,translate" || len(res.Peers) != 1 || res.Peers[0].AgentID != peerID {
			t.Errorf("capabilities or peers: %s", raw)
		}
		if res.BusClients != 1 || strings.Join(res.Topics, ",") != "inbound:*" || res.BusSubscriptions != 1 {
			t.Errorf("bus: %s", raw)
		}
	})
}

// A server without a Control (a relay's public listener) serves none of
// the operator's methods and no addresses.
func TestControlMethodsNeedControl(t *testing.T) {
	ts := newTestServer(t)
	c := dialClient(t, ts.url)
	ctx := context.Background()
	for _, m := range []string{relay.MethodMeshConnect, relay.MethodMeshLogLevel, relay.MethodMeshStatus} {
		err := c.Call(ctx, m, nil, nil)
		var re *relay.RPCError
		if !errors.As(err, &re) || re.Code != relay.CodeMethodNotFound {
			t.Errorf("%s: err = %v; want method not found", m, err)
		}
	}
	var res relay.IDResult
	if err := c.Call(ctx, relay.MethodMeshID, nil, &res); err != nil || res.Addrs != nil || res.PublicKey != selfB64 {
		t.Fatalf("mesh.id = %+v, %v", res, err)
	}
}
