package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// selfB64 is selfID's public key in base64.
const selfB64 = "wHiox8z1mK5g/OoPIWmnYlsiGfbCiF7RDi7yuHAzXM8="

// fakeControl records what the server asks of the operator's control.
type fakeControl struct {
	mu     sync.Mutex
	level  string
	dialed []string
	events []func(protocol.TaskChange) // mesh.taskEvents' subscribers
	caps   []protocol.Capability       // what the node serves itself
}

// Capabilities returns the capabilities the fake node serves.
func (f *fakeControl) Capabilities() []protocol.Capability { return f.caps }

// SubscribeTaskEvents keeps fn until cancel.
func (f *fakeControl) SubscribeTaskEvents(fn func(protocol.TaskChange)) (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, fn)
	i := len(f.events) - 1
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.events[i] = nil
	}, nil
}

// emit sends c to every subscriber and reports how many there were.
func (f *fakeControl) emit(c protocol.TaskChange) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, fn := range f.events {
		if fn != nil {
			fn(c)
			n++
		}
	}
	return n
}

func (*fakeControl) Addrs() []string {
	return []string{"/ip4/127.0.0.1/tcp/4001/p2p/" + selfID}
}

func (f *fakeControl) Connect(ctx context.Context, addr string) (string, bool, error) {
	f.mu.Lock()
	f.dialed = append(f.dialed, addr)
	f.mu.Unlock()
	switch {
	case !strings.HasPrefix(addr, "/"):
		return "", false, fmt.Errorf("%w: %q is not a multiaddr", rpc.ErrInvalidAddr, addr)
	case strings.Contains(addr, "/tcp/1/"):
		return "", false, protocol.Errorf(protocol.CodeUnknownAgent, "dial %s: connection refused", addr)
	}
	_, id, _ := strings.Cut(addr, "/p2p/")
	return id, false, nil
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

func TestControlMethods(t *testing.T) {
	ctl := &fakeControl{level: "info", caps: []protocol.Capability{{Name: "echo"}, {Name: "translate"}}}
	ts := newTestServer(t, rpc.WithControl(ctl))
	c := dialClient(t, ts.url)
	ctx := context.Background()

	t.Run("id has the addresses", func(t *testing.T) {
		var res rpc.IDResult
		if err := c.Call(ctx, rpc.MethodMeshID, nil, &res); err != nil {
			t.Fatal(err)
		}
		if res.AgentID != selfID || res.PublicKey != selfB64 || len(res.Addrs) != 1 || !strings.HasSuffix(res.Addrs[0], "/p2p/"+selfID) {
			t.Fatalf("mesh.id = %+v", res)
		}
	})

	t.Run("capabilities", func(t *testing.T) {
		caps, err := c.Capabilities(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(caps) != 2 || caps[0].Name != "echo" || caps[1].Name != "translate" {
			t.Fatalf("mesh.capabilities = %+v", caps)
		}
		if err := c.Call(ctx, rpc.MethodMeshCapabilities, map[string]any{"x": 1}, nil); err == nil {
			t.Fatal("mesh.capabilities with params: no error")
		}
	})

	t.Run("connect", func(t *testing.T) {
		addr := "/ip4/127.0.0.1/tcp/4001/p2p/" + peerID
		var res rpc.ConnectResult
		if err := c.Call(ctx, rpc.MethodMeshConnect, rpc.ConnectParams{Addr: addr}, &res); err != nil {
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
		{"no addr", map[string]any{}, rpc.CodeInvalidParams, `"addr" is required`},
		{"addr not a string", map[string]any{"addr": 7}, rpc.CodeInvalidParams, `"addr" must be a string`},
		{"unknown field", map[string]any{"addr": "/ip4/1.2.3.4", "port": 1}, rpc.CodeInvalidParams, `unknown field "port"`},
		{"not a multiaddr", rpc.ConnectParams{Addr: "example.com:4001"}, rpc.CodeInvalidParams, "not a multiaddr"},
		{"too long", rpc.ConnectParams{Addr: "/" + strings.Repeat("a", 2000)}, rpc.CodeInvalidParams, "longer than"},
		{"negative timeout", map[string]any{"addr": "/ip4/1.2.3.4", "timeoutMs": -1}, rpc.CodeInvalidParams, `"timeoutMs"`},
		{"string timeout", map[string]any{"addr": "/ip4/1.2.3.4", "timeoutMs": "5s"}, rpc.CodeInvalidParams, `"timeoutMs"`},
		{"unreachable", rpc.ConnectParams{Addr: "/ip4/127.0.0.1/tcp/1/p2p/" + peerID}, rpc.CodeMeshUnknownAgent, "connection refused"},
	}
	for _, tc := range connectErrors {
		t.Run("connect "+tc.name, func(t *testing.T) {
			err := c.Call(ctx, rpc.MethodMeshConnect, tc.params, nil)
			var re *rpc.Error
			if !errors.As(err, &re) || re.Code != tc.wantCode || !strings.Contains(re.Message, tc.wantMsg) {
				t.Fatalf("err = %v; want code %d with %q", err, tc.wantCode, tc.wantMsg)
			}
		})
	}

	t.Run("log level", func(t *testing.T) {
		var res rpc.LogLevelResult
		if err := c.Call(ctx, rpc.MethodMeshLogLevel, nil, &res); err != nil || res.Level != "info" || res.Previous != "info" {
			t.Fatalf("read: %+v, %v", res, err)
		}
		if err := c.Call(ctx, rpc.MethodMeshLogLevel, rpc.LogLevelParams{Level: "debug"}, &res); err != nil {
			t.Fatal(err)
		}
		if res.Previous != "info" || res.Level != "debug" || ctl.LogLevel() != "debug" {
			t.Fatalf("set: %+v, control at %s", res, ctl.LogLevel())
		}
		for _, bad := range []any{map[string]any{"level": "loud"}, map[string]any{"level": 3}, map[string]any{"lvl": "info"}, []string{"info"}} {
			err := c.Call(ctx, rpc.MethodMeshLogLevel, bad, nil)
			var re *rpc.Error
			if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams {
				t.Errorf("params %v: err = %v; want invalid params", bad, err)
			}
		}
		if ctl.LogLevel() != "debug" {
			t.Fatalf("a refused level changed the level to %s", ctl.LogLevel())
		}
	})

	t.Run("status", func(t *testing.T) {
		// What the bus adds with OnStatus (its own tests check it reports
		// its subscriptions).
		ts.srv.OnStatus(func(res *rpc.StatusResult) {
			res.Topics, res.BusSubscriptions = []string{"inbound:*"}, 1
		})
		dialClient(t, ts.url, rpc.WithClientID("watcher"))
		var raw json.RawMessage
		if err := c.Call(ctx, rpc.MethodMeshStatus, nil, &raw); err != nil {
			t.Fatal(err)
		}
		var res rpc.StatusResult
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
	for _, m := range []string{rpc.MethodMeshConnect, rpc.MethodMeshLogLevel, rpc.MethodMeshStatus, rpc.MethodMeshCapabilities, rpc.MethodMeshTaskEvents} {
		err := c.Call(ctx, m, nil, nil)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeMethodNotFound {
			t.Errorf("%s: err = %v; want method not found", m, err)
		}
	}
	var res rpc.IDResult
	if err := c.Call(ctx, rpc.MethodMeshID, nil, &res); err != nil || res.Addrs != nil || res.PublicKey != selfB64 {
		t.Fatalf("mesh.id = %+v, %v", res, err)
	}
}

// TestTaskEvents: with a Control, mesh.taskEvents subscribes the
// connection to the node's task events through Control.SubscribeTaskEvents:
// each arrives as a mesh.taskEvent notification of its subscription, and
// mesh.unsubscribe ends it; params are refused.
func TestTaskEvents(t *testing.T) {
	ctl := &fakeControl{level: "info"}
	mesh := newTopicMesh() // mesh.unsubscribe needs a server with topics
	ts := serveMesh(t, mesh, mesh.Mesh, rpc.WithTopics(mesh), rpc.WithControl(ctl))
	got := make(chan rpc.TaskEventParams, 1)
	c := dialClient(t, ts.url, rpc.WithNotificationHandler(func(method string, params json.RawMessage) {
		var p rpc.TaskEventParams
		if method == rpc.MethodMeshTaskEvent && json.Unmarshal(params, &p) == nil {
			got <- p
		}
	}))
	var sub rpc.SubscribeResult
	if err := c.Call(ctxT(t), rpc.MethodMeshTaskEvents, nil, &sub); err != nil || sub.Subscription == "" {
		t.Fatalf("mesh.taskEvents: %+v %v", sub, err)
	}
	change := protocol.TaskChange{Event: "request.escalated", TaskID: "t1", Capability: "echo", State: protocol.TaskEscalated}
	if n := ctl.emit(change); n != 1 {
		t.Fatalf("%d subscribers, want 1", n)
	}
	select {
	case p := <-got:
		if p.Subscription != sub.Subscription || p.Change.TaskID != "t1" || p.Change.Event != "request.escalated" {
			t.Fatalf("mesh.taskEvent %+v", p)
		}
	case <-ctxT(t).Done():
		t.Fatal("no mesh.taskEvent")
	}
	if err := c.Call(ctxT(t), rpc.MethodMeshUnsubscribe, map[string]string{"subscription": sub.Subscription}, nil); err != nil {
		t.Fatal(err)
	}
	if n := ctl.emit(change); n != 0 {
		t.Fatalf("%d subscribers after mesh.unsubscribe, want 0", n)
	}
	err := c.Call(ctxT(t), rpc.MethodMeshTaskEvents, map[string]any{"x": 1}, nil)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams {
		t.Fatalf("mesh.taskEvents with params: %v, want -32602", err)
	}
}
