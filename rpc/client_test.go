package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	neturl "net/url"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

func TestDialNoServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, url := range []string{addr, "ws://" + addr + "/"} {
		_, err := rpc.Dial(ctxT(t), url)
		if !errors.Is(err, rpc.ErrNoServer) {
			t.Errorf("Dial %s with nothing listening: %v, want ErrNoServer", url, err)
		}
	}
}

// Something that is not the API (a plain web server) is not "no server".
func TestDialNotTheAPI(t *testing.T) {
	hs := httptest.NewServer(http.NotFoundHandler())
	defer hs.Close()
	_, err := rpc.Dial(ctxT(t), hs.Listener.Addr().String())
	if err == nil || errors.Is(err, rpc.ErrNoServer) {
		t.Fatalf("Dial a plain web server: %v", err)
	}
}

// TestDialRefusedCredential: a listener that refuses the token (none, or
// one it does not hold) is ErrUnauthorized; a good one gets in; no error
// Dial returns shows the token, nor does one where nothing listens.
func TestDialRefusedCredential(t *testing.T) {
	const good, wrong = "good-token-0123456789", "wrong-token-0123456789"
	tk, err := rpc.ParseTokens([]byte(`{"tokens":[{"name":"a","token":"` + good + `"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	stack, err := rpctest.New(t, fakemesh.New())
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(tk.Middleware(stack.PublicHandler()))
	t.Cleanup(func() {
		_ = stack.Close()
		hs.Close()
	})
	url := rpctest.WebSocketURL(hs.URL) + "/"
	for _, u := range []string{url, url + "?token=" + wrong, "ws://u:" + wrong + "@" + hs.Listener.Addr().String() + "/?token=" + wrong} {
		_, err := rpc.Dial(ctxT(t), u)
		if !errors.Is(err, rpc.ErrUnauthorized) || strings.Contains(err.Error(), wrong) {
			t.Errorf("Dial %s: %v, want ErrUnauthorized without the token", u, err)
		}
	}
	rpctest.DialClient(t, url+"?token="+good)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, u := range []string{"ws://" + addr + "/?token=" + wrong, "ws://" + addr + "/?token=" + neturl.QueryEscape(wrong+"/+ ")} {
		_, err = rpc.Dial(ctxT(t), u)
		if !errors.Is(err, rpc.ErrNoServer) || strings.Contains(err.Error(), "wrong-token") {
			t.Errorf("Dial %s with nothing listening: %v, want ErrNoServer without the token", u, err)
		}
	}
}

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"ws://127.0.0.1:7892/", "ws://127.0.0.1:7892/"},
		{"ws://127.0.0.1:7892/?token=abc", "ws://127.0.0.1:7892/?token=xxxxx"},
		{"wss://relay.example.com/?a=1&token=abc", "wss://relay.example.com/?a=1&token=xxxxx"},
		{"wss://user:secret@relay.example.com/", "wss://user:xxxxx@relay.example.com/"},
		{"ws://h/?token=", "ws://h/?token=xxxxx"},
		{"ws://h/?x=%zz&token=abc", "ws://h/?token=xxxxx"}, // the query's malformed pair is dropped, the token still hidden
		{"ws://%zz/?token=abc", "(a URL that does not parse)"},
	} {
		if got := rpc.RedactURL(tc.in); got != tc.want {
			t.Errorf("RedactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestNormalizeURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"127.0.0.1:7892", "ws://127.0.0.1:7892/"},
		{" localhost:7892 ", "ws://localhost:7892/"},
		{"[::1]:7892", "ws://[::1]:7892/"},
		{"ws://127.0.0.1:7892", "ws://127.0.0.1:7892/"},
		{"ws://127.0.0.1:7892/", "ws://127.0.0.1:7892/"},
		{"wss://rpc.example.com/api", "wss://rpc.example.com/api"},
		{"wss://rpc.example.com?token=abc", "wss://rpc.example.com/?token=abc"},
		{"127.0.0.1:7892?token=abc", "ws://127.0.0.1:7892/?token=abc"},
	}
	for _, tc := range tests {
		if got := rpc.NormalizeURL(tc.in); got != tc.want {
			t.Errorf("NormalizeURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// Every AgentProtocol error comes back from MeshCall as a *protocol.Error
// with its code, message, details and correlation id; on the wire it had
// the code from the table.
func TestMeshCallErrors(t *testing.T) {
	ts := newTestServer(t)
	c := dialClient(t, ts.url)
	for _, code := range protocol.Codes {
		t.Run(string(code), func(t *testing.T) {
			sent := &protocol.Error{Code: code, Message: "because " + string(code), Details: json.RawMessage(`{"k":[1,2]}`), CorrelationID: "c-" + string(code)}
			params, _ := json.Marshal(sent)
			_, err := c.MeshCall(ctxT(t), protocol.CallRequest{To: peerID, Action: "fail", Params: params}, nil)
			var pe *protocol.Error
			if !errors.As(err, &pe) {
				t.Fatalf("MeshCall: %T %v, want *protocol.Error", err, err)
			}
			if pe.Code != code || pe.Message != sent.Message || string(pe.Details) != string(sent.Details) || pe.CorrelationID != sent.CorrelationID {
				t.Fatalf("got %+v, want %+v", pe, sent)
			}
			if protocol.CodeOf(err) != code {
				t.Fatalf("CodeOf = %s", protocol.CodeOf(err))
			}

			var wire json.RawMessage
			err = c.Call(ctxT(t), rpc.MethodMeshCall, rpc.CallParams{AgentID: peerID, Capability: "fail", Params: params}, &wire)
			var re *rpc.Error
			if !errors.As(err, &re) || re.Code != rpc.MeshErrorCode(code) {
				t.Fatalf("Call: %v, want JSON-RPC code %d", err, rpc.MeshErrorCode(code))
			}
			if got := rpc.ProtocolError(err); got == nil || got.Code != code {
				t.Fatalf("ProtocolError = %v", got)
			}
		})
	}
}

// The codes of the table are distinct, and none collides with JSON-RPC's
// own or seed 001's.
func TestMeshErrorCodesDistinct(t *testing.T) {
	seen := map[int]string{
		rpc.CodeParseError: "parse", rpc.CodeInvalidRequest: "invalid request", rpc.CodeMethodNotFound: "method not found",
		rpc.CodeInvalidParams: "invalid params", rpc.CodeInternalError: "internal",
		rpc.CodeAlreadyInitialized: "seed 001", rpc.CodeInvalidClientInfo: "seed 001", rpc.CodeAlreadySubscribed: "seed 001",
		rpc.CodeSubscriptionNotFound: "seed 001", rpc.CodeServerBusy: "busy", rpc.CodeNotInitialized: "not initialized",
	}
	for _, code := range protocol.Codes {
		n := rpc.MeshErrorCode(code)
		if other, dup := seen[n]; dup {
			t.Errorf("%s maps to %d, already %s", code, n, other)
		}
		if n > -32000 || n < -32099 {
			t.Errorf("%s maps to %d, outside the server-error range", code, n)
		}
		seen[n] = string(code)
	}
	if got := rpc.MeshErrorCode("NO_SUCH_CODE"); got != rpc.CodeMeshInternalError {
		t.Errorf("unknown code maps to %d", got)
	}
}

// Errors that are not AgentProtocol errors stay *RPCError, so callers can
// tell "bad request" from "the agent said no".
func TestClientRPCErrors(t *testing.T) {
	ts := newTestServer(t)
	c := dialClient(t, ts.url)
	err := c.Call(ctxT(t), "nope", nil, nil)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeMethodNotFound || re.Message != "method not found: nope" {
		t.Fatalf("unknown method: %v", err)
	}
	if rpc.ProtocolError(err) != nil {
		t.Fatal("ProtocolError found an AgentProtocol error in a plain JSON-RPC error")
	}
	_, err = c.MeshCall(ctxT(t), protocol.CallRequest{To: "bob", Action: "echo"}, nil)
	if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams {
		t.Fatalf("bad agent id: %v, want -32602", err)
	}
	if err := c.Call(ctxT(t), rpc.MethodPing, "scalar params", nil); err == nil {
		t.Fatal("Call accepted params that are not an object or array")
	}
}

// MeshCall passes every field, normalises the agent id, rounds the
// timeout up to whole milliseconds, and reports progress in order before
// returning.
func TestMeshCall(t *testing.T) {
	ts := newTestServer(t)
	c := dialClient(t, ts.url)
	resp, err := c.MeshCall(ctxT(t), protocol.CallRequest{To: peerB64, Action: "echo", Params: json.RawMessage(`{"a":1}`), Timeout: 1500*time.Millisecond + 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"action":"echo","params":{"a":1},"timeoutMs":1501,"to":"` + peerID + `"}`
	if resp.Status != protocol.StatusSuccess || compact(string(resp.Result)) != want {
		t.Fatalf("got %s %s\nwant %s", resp.Status, resp.Result, want)
	}

	const n = 200
	var got []string
	progress := func(r *protocol.Response) { got = append(got, string(r.Result)) }
	resp, err = c.MeshCall(ctxT(t), protocol.CallRequest{To: peerID, Action: "steps", Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), Progress: progress}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Result) != `{"done":true}` {
		t.Fatalf("final %s", resp.Result)
	}
	if len(got) != n {
		t.Fatalf("%d progress responses before the result, want %d", len(got), n)
	}
	for i, s := range got {
		if s != fmt.Sprintf(`{"step":%d}`, i+1) {
			t.Fatalf("progress %d is %s", i, s)
		}
	}
}

// Concurrent calls on one client each get their own answer and their own
// progress.
func TestClientConcurrentCalls(t *testing.T) {
	ts := newTestServer(t)
	c := dialClient(t, ts.url)
	const workers = 16
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			steps := 0
			resp, err := c.MeshCall(ctxT(t), protocol.CallRequest{To: peerID, Action: "steps", Params: json.RawMessage(fmt.Sprintf(`{"n":%d}`, w))},
				func(*protocol.Response) { steps++ })
			switch {
			case err != nil:
				errs <- err
			case steps != w || resp.Status != protocol.StatusSuccess:
				errs <- fmt.Errorf("worker %d: %d steps, status %s", w, steps, resp.Status)
			default:
				errs <- nil
			}
		}()
	}
	for range workers {
		if err := receive(t, errs, "a worker"); err != nil {
			t.Error(err)
		}
	}
}

// A caller's deadline ends MeshCall with TIMEOUT; the client stays usable.
func TestMeshCallDeadline(t *testing.T) {
	ts := newTestServer(t)
	c := dialClient(t, ts.url)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.MeshCall(ctx, protocol.CallRequest{To: peerID, Action: "block"}, nil)
	if protocol.CodeOf(err) != protocol.CodeTimeout {
		t.Fatalf("MeshCall past its deadline: %v, want TIMEOUT", err)
	}
	if _, err := c.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func TestClientHelpers(t *testing.T) {
	ts := newTestServer(t)
	c := dialClient(t, ts.url)
	if c.URL() != ts.url {
		t.Errorf("URL %q", c.URL())
	}
	id, err := c.AgentID(ctxT(t))
	if err != nil || id != selfID {
		t.Fatalf("AgentID: %q, %v", id, err)
	}
	peers, err := c.Peers(ctxT(t))
	if err != nil || len(peers) != 1 || peers[0].AgentID != peerID || !peers[0].Connected {
		t.Fatalf("Peers: %+v, %v", peers, err)
	}
	now, err := c.Ping(ctxT(t))
	if err != nil || !now.Equal(time.Date(2025, 2, 14, 12, 0, 0, 0, time.UTC)) {
		t.Fatalf("Ping: %v, %v", now, err)
	}
	if c.Err() != nil {
		t.Fatalf("Err while connected: %v", c.Err())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if !errors.Is(c.Err(), rpc.ErrClosed) {
		t.Fatalf("Err after Close: %v", c.Err())
	}
	if _, err := c.Peers(ctxT(t)); !errors.Is(err, rpc.ErrClosed) {
		t.Fatalf("call after Close: %v", err)
	}
}

func TestClientOptions(t *testing.T) {
	if _, err := rpc.Dial(ctxT(t), "127.0.0.1:1", rpc.WithReadLimit(1)); err == nil || errors.Is(err, rpc.ErrNoServer) {
		t.Fatalf("a bad option must fail before dialling: %v", err)
	}
	// An Origin header makes the client look like a browser page.
	ts := newTestServer(t, rpc.WithOriginPatterns("app.example.com"))
	if _, err := rpc.Dial(ctxT(t), ts.url, rpc.WithHTTPHeader(http.Header{"Origin": {"https://evil.example"}})); err == nil {
		t.Fatal("a refused origin dialled")
	}
	c := dialClient(t, ts.url, rpc.WithHTTPHeader(http.Header{"Origin": {"https://app.example.com"}}), rpc.WithReadLimit(1<<20))
	if _, err := c.Ping(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}
