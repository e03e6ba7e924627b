package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Agent ids of fixed Ed25519 keys (seeds sha256("relay-test-self") and
// sha256("relay-test-peer")), so transcripts can name them.
const (
	selfID  = "12D3KooWNmhA9NDeN7QxmnSy3XCuggwjKdFUFur6oAez2Kaioh4a"
	peerID  = "12D3KooWARQ5NFim5LHmaZbpLJXX4ksRtnaZsmP6MLDvP7hZfGEC"
	peerB64 = "CPl8IjggeetZYMd2LRvag5k3EDy6Ijt4SimGTZeB4ok="
)

// testTimeout bounds every wait in these tests.
const testTimeout = 10 * time.Second

// fakeMesh answers calls without any network; a successful answer hands
// a receipt signed by peerID to req.Signed. The capability decides:
//
//	echo      success; result {"to","action","params","timeoutMs"} as received
//	steps     params {"n": k}: k in_progress responses {"step": i}, then success {"done": true}
//	fail      params {"code","message","details"?,"correlationId"?}: that *protocol.Error
//	plain     a plain error ("disk on fire")
//	deadline  context.DeadlineExceeded
//	nil       a nil response and no error
//	panic     panics
//	block     signals entered, then waits for release or ctx (signalling cancelled)
//	other     CAPABILITY_NOT_SUPPORTED with details
type fakeMesh struct {
	entered   chan struct{}
	release   chan struct{}
	cancelled chan struct{}
	calls     atomic.Int64
}

func newFakeMesh() *fakeMesh {
	return &fakeMesh{entered: make(chan struct{}, 64), release: make(chan struct{}), cancelled: make(chan struct{}, 64)}
}

func (*fakeMesh) AgentID() string { return selfID }

func (*fakeMesh) Peers() []protocol.PeerInfo {
	return []protocol.PeerInfo{{
		AgentID:      peerID,
		Name:         "peer",
		Capabilities: []protocol.Capability{{Name: "echo", Description: "echoes <params> & more"}},
		Addrs:        []string{"/ip4/127.0.0.1/tcp/4001"},
		Connected:    true,
	}}
}

func (f *fakeMesh) Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error) {
	f.calls.Add(1)
	ok := func(result string) (*protocol.Response, error) {
		resp := &protocol.Response{CorrelationID: "corr-1", Status: protocol.StatusSuccess, Result: json.RawMessage(result)}
		if req.Signed != nil {
			req.Signed(peerReceipt(resp))
		}
		return resp, nil
	}
	switch req.Action {
	case "echo":
		var buf strings.Builder
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(map[string]any{"to": req.To, "action": req.Action, "params": req.Params, "timeoutMs": req.Timeout.Milliseconds()}); err != nil {
			return nil, err
		}
		return ok(buf.String())
	case "steps":
		var p struct{ N int }
		_ = json.Unmarshal(req.Params, &p)
		for i := 1; i <= p.N; i++ {
			req.Progress(&protocol.Response{CorrelationID: "corr-1", Status: protocol.StatusInProgress, Result: json.RawMessage(fmt.Sprintf(`{"step":%d}`, i))})
		}
		return ok(`{"done":true}`)
	case "fail":
		var pe protocol.Error
		if err := json.Unmarshal(req.Params, &pe); err != nil {
			return nil, err
		}
		return nil, &pe
	case "plain":
		return nil, errors.New("disk on fire")
	case "deadline":
		return nil, fmt.Errorf("waiting for peer: %w", context.DeadlineExceeded)
	case "whoami":
		b, err := json.Marshal(map[string]string{"onBehalfOf": req.OnBehalfOf})
		if err != nil {
			return nil, err
		}
		return ok(string(b))
	case "nil":
		return nil, nil
	case "panic":
		panic("fake mesh panicked")
	case "block":
		f.entered <- struct{}{}
		select {
		case <-f.release:
			return ok(`"released"`)
		case <-ctx.Done():
			f.cancelled <- struct{}{}
			return nil, ctx.Err()
		}
	default:
		return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "agent does not offer %s", req.Action).
			WithDetails(map[string]any{"requested": req.Action, "available": []string{"echo", "steps"}})
	}
}

// testLogger is the shared test logger (internal/testlog).
func testLogger(t testing.TB) *slog.Logger { return testlog.New(t) }

// testClock is the test servers' clock: ping's timestamp is fixed.
func testClock() time.Time { return time.Date(2025, 2, 14, 12, 0, 0, 0, time.UTC) }

// testServer is a relay server with a fake mesh behind an httptest server.
type testServer struct {
	srv  *rpc.Server
	mesh *fakeMesh
	url  string
}

func newTestServer(t *testing.T, opts ...rpc.Option) *testServer {
	t.Helper()
	mesh := newFakeMesh()
	return serveMesh(t, mesh, mesh, opts...)
}

// serveMesh is newTestServer for m, which is mesh or embeds it (as
// topicMesh does).
func serveMesh(t *testing.T, m rpc.Mesh, mesh *fakeMesh, opts ...rpc.Option) *testServer {
	t.Helper()
	srv, err := rpc.New(m, append([]rpc.Option{rpc.WithLogger(testLogger(t)), rpc.WithClock(testClock)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		// Close ends blocked calls through their contexts.
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		hs.Close()
	})
	return &testServer{srv: srv, mesh: mesh, url: "ws" + strings.TrimPrefix(hs.URL, "http") + "/"}
}

// dialRaw opens a WebSocket to the server and, for the API (not the
// lobby), initializes it (seed 001: nothing else is served before), for
// tests that need to
// send exact frames.
func dialRaw(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(16 << 20)
	t.Cleanup(func() { _ = ws.CloseNow() })
	if !strings.HasSuffix(url, "/lobby") {
		initRaw(t, ws, fmt.Sprintf("raw-%d", rawClients.Add(1)))
	}
	return ws
}

// dialBare opens a WebSocket to the server and sends nothing.
func dialBare(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.CloseNow() })
	return ws
}

var rawClients atomic.Int64

// initRaw initializes a raw connection as id.
func initRaw(t *testing.T, ws *websocket.Conn, id string) {
	t.Helper()
	writeFrame(t, ws, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"clientId":"`+id+`","clientInfo":{"name":"raw"}}}`)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, b, err := ws.Read(ctx)
	if err != nil || !strings.Contains(string(b), `"result"`) {
		t.Fatalf("initialize: %s %v", b, err)
	}
}

func dialClient(t *testing.T, url string, opts ...rpc.ClientOption) *rpc.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := rpc.Dial(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func writeFrame(t *testing.T, ws *websocket.Conn, frame string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := ws.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		t.Fatalf("write %s: %v", frame, err)
	}
}

func readFrame(t *testing.T, ws *websocket.Conn) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, b, err := ws.Read(ctx)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(b)
}

// waitFor polls cond until it holds or the test timeout passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.For(t, testTimeout, func() error {
		if !cond() {
			return errors.New("still waiting for " + what)
		}
		return nil
	})
}

// receive waits for one value on ch, or fails the test.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(testTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}
