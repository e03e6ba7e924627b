package rpctest

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/daemon"
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/internal/wstest"
	"github.com/meshagent/meshagent/rpc"
)

// Timeout bounds every dial and initialize of this package.
const Timeout = wstest.Timeout

// Clock is a fixed clock for servers whose answers a transcript records:
// ping's timestamp is always 2025-02-14T12:00:00Z.
func Clock() time.Time { return time.Date(2025, 2, 14, 12, 0, 0, 0, time.UTC) }

// Stack is an rpc.Server and, with WithBus, a bus on it.
type Stack struct {
	*rpc.Server
	// Bus is nil unless WithBus was given.
	Bus *bus.Bus
}

// Close closes the server, then the bus (daemon.BusServer's order).
func (s *Stack) Close() error {
	err := s.Server.Close()
	if s.Bus != nil {
		err = errors.Join(err, s.Bus.Close())
	}
	return err
}

// Option configures New and Start.
type Option func(*options)

type options struct {
	rpc     []rpc.Option
	bus     []bus.Option
	withBus bool
}

// WithRPC adds server options, after the test logger.
func WithRPC(opts ...rpc.Option) Option {
	return func(o *options) { o.rpc = append(o.rpc, opts...) }
}

// WithBus serves a bus on the server, with these options after the test
// logger and the server's clock. It may be given more than once.
func WithBus(opts ...bus.Option) Option {
	return func(o *options) {
		o.withBus = true
		o.bus = append(o.bus, opts...)
	}
}

// New builds a Stack over mesh without serving it; the caller closes it.
func New(tb testing.TB, mesh rpc.Mesh, opts ...Option) (*Stack, error) {
	var o options
	for _, f := range opts {
		f(&o)
	}
	log := testlog.New(tb)
	if o.withBus {
		bs, err := daemon.NewBusServer(mesh, log, o.rpc, o.bus...)
		if err != nil {
			return nil, err
		}
		return &Stack{Server: bs.Server, Bus: bs.Bus}, nil
	}
	srv, err := rpc.New(mesh, append([]rpc.Option{rpc.WithLogger(log)}, o.rpc...)...)
	if err != nil {
		return nil, err
	}
	return &Stack{Server: srv}, nil
}

// Server is a Stack served over HTTP on a loopback port.
type Server struct {
	*Stack
	// URL is the WebSocket URL of the local API: ws://127.0.0.1:port/.
	URL string
}

// Start builds a Stack over mesh and serves it until the test ends, when
// it is closed (which ends blocked calls through their contexts) and the
// HTTP server with it.
func Start(tb testing.TB, mesh rpc.Mesh, opts ...Option) *Server {
	tb.Helper()
	s, err := New(tb, mesh, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	hs := httptest.NewServer(s)
	tb.Cleanup(func() {
		if err := s.Close(); err != nil {
			tb.Errorf("Close: %v", err)
		}
		hs.Close()
	})
	return &Server{Stack: s, URL: WebSocketURL(hs.URL) + "/"}
}

// WebSocketURL turns an httptest server's http:// URL into its ws:// one.
func WebSocketURL(httpURL string) string { return "ws" + strings.TrimPrefix(httpURL, "http") }

// DialClient dials url with the Go client, closed at the end of the test.
func DialClient(tb testing.TB, url string, opts ...rpc.ClientOption) *rpc.Client {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	c, err := rpc.Dial(ctx, url, opts...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// DialBare opens a WebSocket to url and sends nothing.
func DialBare(tb testing.TB, url string) *websocket.Conn {
	tb.Helper()
	return wstest.Dial(tb, url).WS
}

// rawClients numbers the raw clients, whose ids must differ.
var rawClients atomic.Int64

// DialRaw opens a WebSocket to url and initializes it under a fresh
// client id, for tests that send exact frames.
func DialRaw(tb testing.TB, url string) *websocket.Conn {
	tb.Helper()
	ws := DialBare(tb, url)
	InitRaw(tb, ws, fmt.Sprintf("raw-%d", rawClients.Add(1)))
	return ws
}

// InitRaw initializes a raw connection as client id.
func InitRaw(tb testing.TB, ws *websocket.Conn, id string) {
	tb.Helper()
	wstest.WriteFrame(tb, ws, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"clientId":"`+id+`","clientInfo":{"name":"raw"}}}`)
	if b := wstest.ReadFrame(tb, ws); !strings.Contains(b, `"result"`) {
		tb.Fatalf("initialize: %s", b)
	}
}
