package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

func smallLimits() rpc.Limits {
	l := rpc.DefaultLimits()
	l.MaxMessageBytes = 4096
	return l
}

// An oversize message closes that connection with 1009; another client on
// the same server keeps working.
func TestOversizeMessageClosesOnlyThatConnection(t *testing.T) {
	ts := newTestServer(t, rpc.WithLimits(smallLimits()))
	good := dialClient(t, ts.url)
	bad := dialRaw(t, ts.url)

	huge := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("x", 8192) + `"}}`
	writeFrame(t, bad, huge)
	ctx := ctxT(t)
	_, _, err := bad.Read(ctx)
	if got := websocket.CloseStatus(err); got != websocket.StatusMessageTooBig {
		t.Fatalf("oversize sender: read error %v (status %v), want close status 1009", err, got)
	}
	if _, err := good.Ping(ctx); err != nil {
		t.Fatalf("other client after the oversize message: %v", err)
	}
	waitFor(t, "the oversize client to be dropped", func() bool { return ts.srv.Clients() == 1 })

	// A message just under the limit is fine.
	ok := dialRaw(t, ts.url)
	fits := `{"jsonrpc":"2.0","id":2,"method":"nope","params":{"pad":"` + strings.Repeat("x", 4000) + `"}}`
	writeFrame(t, ok, fits)
	if got := readFrame(t, ok); !strings.Contains(got, `"code":-32601`) {
		t.Fatalf("message under the limit: got %s", got)
	}
}

// A client that never reads is disconnected once its send queue fills or a
// write times out; the server does not wait for it and other clients
// proceed.
func TestSlowClientDisconnected(t *testing.T) {
	l := rpc.DefaultLimits()
	l.SendQueue = 4
	l.WriteTimeout = 500 * time.Millisecond
	ts := newTestServer(t, rpc.WithLimits(l))

	type floodResult struct {
		sent int
		err  error
	}
	results := make(chan floodResult, 1)
	closed := make(chan struct{})
	ts.srv.Handle("test.flood", func(ctx context.Context, req *rpc.Request) (any, error) {
		req.Conn.AfterClose(func() { close(closed) })
		pad := strings.Repeat("x", 64<<10)
		for i := range 100000 {
			if err := req.Conn.Notify("test.data", map[string]any{"i": i, "pad": pad}); err != nil {
				results <- floodResult{i, err}
				return nil, err
			}
		}
		results <- floodResult{100000, nil}
		return "done", nil
	})

	healthy := dialClient(t, ts.url)
	slow := dialRaw(t, ts.url)
	writeFrame(t, slow, `{"jsonrpc":"2.0","id":1,"method":"test.flood"}`)
	// slow never reads again.

	r := receive(t, results, "the flood to end")
	if !errors.Is(r.err, rpc.ErrSlowConsumer) && !errors.Is(r.err, rpc.ErrClosed) {
		t.Fatalf("flood: sent %d, err %v; want ErrSlowConsumer or ErrClosed", r.sent, r.err)
	}
	receive(t, closed, "the slow connection's AfterClose")
	if _, err := healthy.Ping(ctxT(t)); err != nil {
		t.Fatalf("healthy client: %v", err)
	}
	waitFor(t, "one client left", func() bool { return ts.srv.Clients() == 1 })
}

// A client that does not answer pings is disconnected; one that reads
// stays.
func TestKeepAlive(t *testing.T) {
	l := rpc.DefaultLimits()
	l.PingInterval = 200 * time.Millisecond
	ts := newTestServer(t, rpc.WithLimits(l))
	closed := make(chan uint64, 2)
	ts.srv.Handle("test.watch", func(ctx context.Context, req *rpc.Request) (any, error) {
		id := req.Conn.ID()
		req.Conn.AfterClose(func() { closed <- id })
		return id, nil
	})
	healthy := dialClient(t, ts.url)
	var healthyID uint64
	if err := healthy.Call(ctxT(t), "test.watch", nil, &healthyID); err != nil {
		t.Fatal(err)
	}
	deaf := dialRaw(t, ts.url)
	writeFrame(t, deaf, `{"jsonrpc":"2.0","id":1,"method":"test.watch"}`)
	var resp struct{ Result uint64 }
	if err := json.Unmarshal([]byte(readFrame(t, deaf)), &resp); err != nil {
		t.Fatal(err)
	}
	// deaf stops reading, so it never sees (or answers) a ping.
	if got := receive(t, closed, "the deaf client to be dropped"); got != resp.Result {
		t.Fatalf("connection %d dropped, want the deaf one, %d", got, resp.Result)
	}
	if _, err := healthy.Ping(ctxT(t)); err != nil {
		t.Fatalf("healthy client after several ping intervals: %v", err)
	}
}

// Requests run off the read loop: a blocked call does not delay others on
// the same connection, and past MaxConcurrentCalls the server answers
// -32005 instead of reading more slowly.
func TestConcurrentCallLimit(t *testing.T) {
	l := rpc.DefaultLimits()
	l.MaxConcurrentCalls = 2
	ts := newTestServer(t, rpc.WithLimits(l))
	c := dialClient(t, ts.url)
	ctx := ctxT(t)

	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.MeshCall(ctx, protocol.CallRequest{To: peerID, Action: "block"}, nil)
			errs <- err
		}()
	}
	receive(t, ts.mesh.Entered, "the first blocked call")
	receive(t, ts.mesh.Entered, "the second blocked call")

	err := c.Call(ctx, rpc.MethodPing, nil, nil)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeServerBusy {
		t.Fatalf("third request while two run: %v, want code %d", err, rpc.CodeServerBusy)
	}

	close(ts.mesh.Release)
	for range 2 {
		if err := receive(t, errs, "a released call"); err != nil {
			t.Fatalf("released call: %v", err)
		}
	}
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("after the calls finished: %v", err)
	}
}

// A client that waits for each answer before its next request is never
// refused, even at one request at a time: the place of a request is free
// by the time its answer can arrive.
func TestSequentialCallsNeverBusy(t *testing.T) {
	l := rpc.DefaultLimits()
	l.MaxConcurrentCalls = 1
	ts := newTestServer(t, rpc.WithLimits(l))
	c := dialClient(t, ts.url)
	ctx := ctxT(t)
	for i := range 2000 {
		if err := c.Call(ctx, rpc.MethodPing, nil, nil); err != nil {
			t.Fatalf("call %d, made after the answer to the one before: %v", i, err)
		}
	}
}

// Closing the client cancels its calls in the mesh.
func TestClientDisconnectCancelsCalls(t *testing.T) {
	ts := newTestServer(t)
	ctx := ctxT(t)
	c, err := rpc.Dial(ctx, ts.url)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.MeshCall(ctx, protocol.CallRequest{To: peerID, Action: "block"}, nil)
		done <- err
	}()
	receive(t, ts.mesh.Entered, "the call to reach the mesh")
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := receive(t, done, "the call to fail"); !errors.Is(err, rpc.ErrClosed) {
		t.Fatalf("call on a closed client: %v, want ErrClosed", err)
	}
	receive(t, ts.mesh.Cancelled, "the mesh call's context to end")
}

// Server.Close ends calls, disconnects clients with 1001, is idempotent,
// and refuses to serve again.
func TestServerClose(t *testing.T) {
	mesh := fakemesh.New()
	srv, err := rpc.New(mesh, rpc.WithLogger(testlog.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if srv.Addr() == nil || !strings.HasPrefix(srv.URL(), "ws://127.0.0.1:") {
		t.Fatalf("Addr %v, URL %q", srv.Addr(), srv.URL())
	}
	c := dialClient(t, srv.URL())
	raw := dialRaw(t, srv.URL())
	ctx := ctxT(t)
	done := make(chan error, 1)
	go func() {
		_, err := c.MeshCall(ctx, protocol.CallRequest{To: peerID, Action: "block"}, nil)
		done <- err
	}()
	receive(t, mesh.Entered, "the call to reach the mesh")

	readErr := make(chan error, 1)
	go func() {
		_, _, err := raw.Read(ctx)
		readErr <- err
	}()
	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	receive(t, mesh.Cancelled, "the mesh call's context to end")
	if err := receive(t, done, "the call to fail"); !errors.Is(err, rpc.ErrClosed) {
		t.Fatalf("call when the server closed: %v, want an error wrapping ErrClosed", err)
	}
	if err := receive(t, readErr, "the raw client to be closed"); websocket.CloseStatus(err) != websocket.StatusGoingAway {
		t.Fatalf("raw client read %v, want close status 1001 going away", err)
	}
	receive(t, c.Done(), "the client to notice")
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := srv.Start("127.0.0.1:0"); !errors.Is(err, rpc.ErrServerClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
	if srv.Clients() != 0 {
		t.Fatalf("%d clients after Close", srv.Clients())
	}
}

func TestServeReturnsAfterClose(t *testing.T) {
	srv, err := rpc.New(fakemesh.New(), rpc.WithLogger(testlog.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe("127.0.0.1:0") }()
	waitFor(t, "the listener", func() bool { return srv.Addr() != nil })
	c := dialClient(t, srv.URL())
	if _, err := c.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if err := receive(t, served, "ListenAndServe to return"); !errors.Is(err, rpc.ErrServerClosed) {
		t.Fatalf("ListenAndServe: %v, want ErrServerClosed", err)
	}
}

func TestOrigins(t *testing.T) {
	tests := []struct {
		name     string
		patterns []string
		origin   string
		ok       bool
	}{
		{"no origin header (not a browser)", nil, "", true},
		{"browser, nothing configured", nil, "http://evil.example", false},
		{"browser on loopback, nothing configured", nil, "http://127.0.0.1:7892", false},
		{"host pattern", []string{"app.example.com"}, "https://app.example.com", true},
		{"host pattern is case-insensitive", []string{"App.Example.com"}, "https://app.example.COM", true},
		{"host pattern, other host", []string{"app.example.com"}, "https://evil.example", false},
		{"wildcard subdomain", []string{"*.example.com"}, "https://a.example.com", true},
		{"wildcard does not match the apex", []string{"*.example.com"}, "https://example.com", false},
		{"pattern with scheme", []string{"https://app.example.com"}, "https://app.example.com", true},
		{"pattern with scheme, other scheme", []string{"https://app.example.com"}, "http://app.example.com", false},
		{"port is part of the host", []string{"localhost:3000"}, "http://localhost:3000", true},
		{"any origin", []string{"*"}, "https://anything.example", true},
		{"any origin includes null", []string{"*"}, "null", true},
		{"null origin, nothing configured", nil, "null", false},
		{"garbage origin", []string{"app.example.com"}, "garbage", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ts := newTestServer(t, rpc.WithOriginPatterns(tc.patterns...))
			h := http.Header{}
			if tc.origin != "" {
				h.Set("Origin", tc.origin)
			}
			ws, resp, err := websocket.Dial(ctxT(t), ts.url, &websocket.DialOptions{HTTPHeader: h})
			if ws != nil {
				defer ws.CloseNow()
			}
			if tc.ok && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if !tc.ok {
				if err == nil {
					t.Fatal("accepted")
				}
				if resp == nil || resp.StatusCode != http.StatusForbidden {
					t.Fatalf("refused with %v, want HTTP 403", resp)
				}
			}
		})
	}
}

func TestBadOriginPattern(t *testing.T) {
	if _, err := rpc.New(fakemesh.New(), rpc.WithOriginPatterns("[")); err == nil {
		t.Fatal("New accepted a malformed origin pattern")
	}
}

func TestMaxClients(t *testing.T) {
	l := rpc.DefaultLimits()
	l.MaxClients = 1
	ts := newTestServer(t, rpc.WithLimits(l))
	// An initialized client (Dial initializes) keeps its slot (one that
	// never initializes would be evicted for the newcomer:
	// TestIdleFloodDoesNotLockOut).
	first, err := rpc.Dial(ctxT(t), ts.url, rpc.WithClientID("first"))
	if err != nil {
		t.Fatal(err)
	}
	_, resp, err := websocket.Dial(ctxT(t), ts.url, nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("second client: %v (%v), want HTTP 503", err, resp)
	}
	_ = first.Close()
	waitFor(t, "the first client to go", func() bool { return ts.srv.Clients() == 0 })
	dialClient(t, ts.url)
}

func TestHTTPPaths(t *testing.T) {
	ts := newTestServer(t)
	base := "http" + strings.TrimPrefix(ts.url, "ws")
	for _, tc := range []struct {
		path string
		want int
	}{
		{"nope", http.StatusNotFound},
		{"", http.StatusUpgradeRequired},
	} {
		resp, err := http.Get(base + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("GET /%s: %d, want %d", tc.path, resp.StatusCode, tc.want)
		}
	}
}

// A handler can call the client back on its connection (as the bus's
// processMessage will) and push notifications, which arrive in order
// before the handler's own response.
func TestServerInitiatedMessages(t *testing.T) {
	ts := newTestServer(t)
	ts.srv.Handle("test.deliver", func(ctx context.Context, req *rpc.Request) (any, error) {
		for i := range 3 {
			if err := req.Conn.Notify("test.event", map[string]int{"seq": i}); err != nil {
				return nil, err
			}
		}
		var ack struct {
			Processed bool   `json:"processed"`
			Message   string `json:"message"`
		}
		err := req.Conn.Call(ctx, "processMessage", map[string]any{"topic": "tg:1", "payload": json.RawMessage(req.Params)}, &ack)
		if err != nil {
			var re *rpc.Error
			if errors.As(err, &re) {
				return map[string]any{"clientError": re.Code}, nil
			}
			return nil, err
		}
		return ack, nil
	})

	var mu sync.Mutex
	var events []string
	c := dialClient(t, ts.url,
		rpc.WithNotificationHandler(func(method string, params json.RawMessage) {
			mu.Lock()
			events = append(events, method+" "+string(params))
			mu.Unlock()
		}),
		rpc.WithRequestHandler(func(ctx context.Context, method string, params json.RawMessage) (any, error) {
			var p struct {
				Topic   string
				Payload struct{ Fail bool }
			}
			if err := json.Unmarshal(params, &p); err != nil {
				return nil, err
			}
			if p.Payload.Fail {
				return nil, rpc.Errorf(-32050, "cannot process")
			}
			return map[string]any{"processed": true, "message": method + " on " + p.Topic}, nil
		}))

	var got map[string]any
	if err := c.Call(ctxT(t), "test.deliver", map[string]bool{"fail": false}, &got); err != nil {
		t.Fatal(err)
	}
	if got["processed"] != true || got["message"] != "processMessage on tg:1" {
		t.Fatalf("result %v", got)
	}
	mu.Lock()
	want := []string{`test.event {"seq":0}`, `test.event {"seq":1}`, `test.event {"seq":2}`}
	if fmt.Sprint(events) != fmt.Sprint(want) {
		t.Errorf("notifications %q, want %q", events, want)
	}
	mu.Unlock()

	if err := c.Call(ctxT(t), "test.deliver", map[string]bool{"fail": true}, &got); err != nil {
		t.Fatal(err)
	}
	if got["clientError"] != float64(-32050) {
		t.Fatalf("client error not passed back: %v", got)
	}

	// A client without a request handler answers method not found.
	bare := dialClient(t, ts.url)
	if err := bare.Call(ctxT(t), "test.deliver", map[string]bool{}, &got); err != nil {
		t.Fatal(err)
	}
	if got["clientError"] != float64(rpc.CodeMethodNotFound) {
		t.Fatalf("bare client: %v", got)
	}
}

func TestConnValuesAndClose(t *testing.T) {
	ts := newTestServer(t)
	type key struct{}
	ts.srv.Handle("test.count", func(ctx context.Context, req *rpc.Request) (any, error) {
		n, _ := req.Conn.Value(key{}).(int)
		req.Conn.SetValue(key{}, n+1)
		return n + 1, nil
	})
	ts.srv.Handle("test.bye", func(ctx context.Context, req *rpc.Request) (any, error) {
		return nil, req.Conn.Close()
	})
	c := dialClient(t, ts.url)
	for want := 1; want <= 3; want++ {
		var n int
		if err := c.Call(ctxT(t), "test.count", nil, &n); err != nil || n != want {
			t.Fatalf("count: %d, %v; want %d", n, err, want)
		}
	}
	other := dialClient(t, ts.url)
	var n int
	if err := other.Call(ctxT(t), "test.count", nil, &n); err != nil || n != 1 {
		t.Fatalf("state leaked between connections: %d, %v", n, err)
	}
	// test.bye's own answer may or may not get out before the close; a
	// notification queued before Close does.
	ts.srv.Handle("test.last-words", func(ctx context.Context, req *rpc.Request) (any, error) {
		if err := req.Conn.Notify("test.goodbye", nil); err != nil {
			return nil, err
		}
		return nil, req.Conn.Close()
	})
	words := make(chan string, 1)
	last := dialClient(t, ts.url, rpc.WithNotificationHandler(func(method string, _ json.RawMessage) { words <- method }))
	_ = last.Call(ctxT(t), "test.last-words", nil, nil)
	if got := receive(t, words, "the last notification"); got != "test.goodbye" {
		t.Fatalf("got %q", got)
	}
	receive(t, last.Done(), "the server to close the connection")

	_ = c.Call(ctxT(t), "test.bye", nil, nil)
	receive(t, c.Done(), "the server to close the connection")
	if err := c.Call(ctxT(t), rpc.MethodPing, nil, nil); !errors.Is(err, rpc.ErrClosed) {
		t.Fatalf("call after the server closed: %v", err)
	}
}

func TestLimitsValidate(t *testing.T) {
	mutate := map[string]func(*rpc.Limits){
		"MaxMessageBytes":    func(l *rpc.Limits) { l.MaxMessageBytes = 10 },
		"SendQueue":          func(l *rpc.Limits) { l.SendQueue = 0 },
		"WriteTimeout":       func(l *rpc.Limits) { l.WriteTimeout = 0 },
		"MaxBatch":           func(l *rpc.Limits) { l.MaxBatch = 0 },
		"MaxConcurrentCalls": func(l *rpc.Limits) { l.MaxConcurrentCalls = 0 },
		"MaxClients":         func(l *rpc.Limits) { l.MaxClients = 0 },
		"PingInterval":       func(l *rpc.Limits) { l.PingInterval = -1 },
		"MaxClientsPerIP":    func(l *rpc.Limits) { l.MaxClientsPerIP = 0 },
		"InitTimeout":        func(l *rpc.Limits) { l.InitTimeout = 0 },
		"MaxPendingCalls":    func(l *rpc.Limits) { l.MaxPendingCalls = 0 },
		"PerIPExempt":        func(l *rpc.Limits) { l.PerIPExempt = append(l.PerIPExempt, netip.Prefix{}) },
	}
	if err := rpc.DefaultLimits().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for field, f := range mutate {
		l := rpc.DefaultLimits()
		f(&l)
		err := l.Validate()
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%s out of range: %v", field, err)
		}
		if _, err := rpc.New(fakemesh.New(), rpc.WithLimits(l)); err == nil {
			t.Errorf("New accepted bad %s", field)
		}
	}
	if _, err := rpc.New(nil); err == nil {
		t.Error("New accepted a nil Mesh")
	}
	if _, err := rpc.New(fakemesh.New(), rpc.WithLogger(nil)); err == nil {
		t.Error("New accepted a nil logger")
	}
	for name, opt := range map[string]rpc.Option{
		"nil Publisher":         rpc.WithTopics(nil),
		"nil DurableSubscriber": rpc.WithDurables(nil),
		"nil AnyCaller":         rpc.WithAnyCaller(nil),
		"nil Control":           rpc.WithControl(nil),
		"nil Provider":          rpc.WithProvider(nil),
		"need topics":           rpc.WithDurables(newDurableMesh()),
	} {
		if _, err := rpc.New(fakemesh.New(), opt); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("New with %s: %v", name, err)
		}
	}
}

// allMesh can do everything a server may be built to serve: topics,
// durable subscriptions and choosing the provider of a call.
type allMesh struct{ *durableMesh }

func (m allMesh) CallAny(ctx context.Context, req protocol.CallRequest) (*protocol.Response, string, error) {
	return anyMesh{m.Mesh}.CallAny(ctx, req)
}

// TestServesWhatItIsBuiltWith: what a server serves beyond Mesh is what
// its options state, not what its Mesh's type can do. Over a mesh that
// can do everything, a server built with no option answers the topic
// methods -32601 and mesh.call without agentId -32602, and one built
// with topics only refuses a durable subscribe.
func TestServesWhatItIsBuiltWith(t *testing.T) {
	mesh := allMesh{newDurableMesh()}
	cases := []struct {
		name   string
		opts   []rpc.Option
		params map[string]string // method → params
		want   string            // in each answer
	}{
		{"nothing", nil, map[string]string{
			rpc.MethodMeshPublish:     `{"topic":"news:1","payload":{}}`,
			rpc.MethodMeshSubscribe:   `{"pattern":"news:*"}`,
			rpc.MethodMeshUnsubscribe: `{"subscription":"s1"}`,
		}, `"code":-32601`},
		{"a provider", []rpc.Option{rpc.WithProvider(&fakeProvider{})}, map[string]string{
			rpc.MethodMeshSendMessage: `{"type":"broadcast","subject":"s","body":"b"}`,
		}, `"code":-32601,"message":"this node has no topics: a broadcast cannot be sent"`},
		{"nothing", nil, map[string]string{
			rpc.MethodMeshCall: `{"capability":"echo"}`,
		}, `\"agentId\" is required`},
		{"topics", []rpc.Option{rpc.WithTopics(mesh)}, map[string]string{
			rpc.MethodMeshSubscribe: `{"pattern":"news:*","durable":"d"}`,
		}, `runs no durable subscriptions`},
	}
	for _, tc := range cases {
		ws := dialRaw(t, serveMesh(t, mesh, mesh.Mesh, tc.opts...).url)
		for method, params := range tc.params {
			writeFrame(t, ws, `{"jsonrpc":"2.0","id":1,"method":"`+method+`","params":`+params+`}`)
			if got := readFrame(t, ws); !strings.Contains(got, tc.want) {
				t.Errorf("%s: %s: got %s, want %s", tc.name, method, got, tc.want)
			}
		}
	}
	if mesh.Calls.Load() != 0 {
		t.Errorf("the mesh was called %d times", mesh.Calls.Load())
	}
}

// A batch larger than MaxBatch is refused as a whole.
func TestBatchLimit(t *testing.T) {
	l := rpc.DefaultLimits()
	l.MaxBatch = 3
	ts := newTestServer(t, rpc.WithLimits(l))
	ws := dialRaw(t, ts.url)
	one := `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	writeFrame(t, ws, "["+strings.Repeat(one+",", 3)+one+"]")
	want := `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request: batch of 4 exceeds the limit of 3"}}`
	if got := readFrame(t, ws); got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	writeFrame(t, ws, "["+strings.Repeat(one+",", 2)+one+"]")
	if got := readFrame(t, ws); !strings.HasPrefix(got, "[") || strings.Count(got, `"result"`) != 3 {
		t.Fatalf("batch at the limit: %s", got)
	}
}

// TestServerMethods: Methods lists what the server serves, sorted: its
// own methods, and one registered later with Handle.
func TestServerMethods(t *testing.T) {
	srv, err := rpc.New(fakemesh.New(), rpc.WithLogger(testlog.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	srv.Handle("zz.added", func(context.Context, *rpc.Request) (any, error) { return nil, nil })
	got := srv.Methods()
	for _, want := range []string{rpc.MethodInitialize, rpc.MethodMeshCall, rpc.MethodMeshID, "zz.added"} {
		if !slices.Contains(got, want) {
			t.Errorf("Methods() = %v, without %s", got, want)
		}
	}
	if !slices.IsSorted(got) {
		t.Errorf("Methods() = %v, not sorted", got)
	}
}
