package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/internal/wsconn"
)

// Request is one JSON-RPC request or notification being served.
type Request struct {
	// Conn is the connection it arrived on.
	Conn *Conn
	// Method is the method name.
	Method string
	// ID is the request id exactly as the client sent it; nil for a
	// notification.
	ID json.RawMessage
	// Params is the raw params object or array; nil when absent.
	Params json.RawMessage
}

// IsNotification reports whether the client expects no response.
func (r *Request) IsNotification() bool { return r.ID == nil }

// HandlerFunc serves one JSON-RPC method. It runs on its own goroutine;
// ctx ends when the connection closes, and the handler must then return
// promptly, since Server.Close waits for it. Return an *Error to choose
// the error code, or a *protocol.Error to send an AgentProtocol error;
// any other error becomes CodeInternalError. The result is encoded as
// JSON (a json.RawMessage passes through as is). For a notification the
// result is discarded.
type HandlerFunc func(ctx context.Context, req *Request) (any, error)

// Conn is one client connection. Handlers reach it through Request.Conn to
// send the client notifications and requests of its own, and to keep
// per-connection state.
//
// Goroutines: the read loop (the HTTP handler's goroutine), one writer,
// one pinger when Limits.PingInterval > 0, and one per request being
// served. The read loop starts all the others and, when the connection
// ends, waits for them before it returns; Server.Close waits for the read
// loops.
//
// Outgoing messages go through a bounded queue drained by the writer. A
// full queue, or a write that misses Limits.WriteTimeout, disconnects the
// client: the server never waits for a slow reader. Requests of the
// server's own (Call) are bounded separately by Limits.MaxPendingCalls:
// beyond it Call waits for a slot, which slows the callers (the bus's
// senders) instead of filling the queue of a client that is reading.
type Conn struct {
	srv   *Server
	wc    *wsconn.Conn // the socket, send queue, writer, pinger and request goroutines
	log   *slog.Logger
	calls chan struct{} // one per server-initiated request awaiting its answer

	initMu sync.Mutex // serialises initialize on this connection

	mu       sync.Mutex
	clientID string // set by a successful initialize
	finished bool   // AfterClose hooks have run
	nextID   int64
	pending  map[string]chan *message // server-initiated requests awaiting answers
	values   map[any]any
	onClose  []func()

	// replyAny is c.replyIfAny, made once: a method value made per
	// frame is an allocation per message.
	replyAny func(*response)
}

// ID returns the connection's number, unique within its server.
func (c *Conn) ID() uint64 { return c.wc.ID() }

// RemoteAddr returns the client's network address as the HTTP server saw
// it.
func (c *Conn) RemoteAddr() string { return c.wc.RemoteAddr() }

// Context returns a context that ends when the connection starts closing.
func (c *Conn) Context() context.Context { return c.wc.Context() }

// SetValue stores per-connection state under key (use an unexported key
// type, as with context values).
func (c *Conn) SetValue(key, value any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.values == nil {
		c.values = make(map[any]any)
	}
	c.values[key] = value
}

// Value returns the state stored under key, or nil.
func (c *Conn) Value(key any) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.values[key]
}

// LoadOrStoreValue returns the state stored under key; with none, it
// stores value and returns it. Two callers racing on one key get the same
// state.
func (c *Conn) LoadOrStoreValue(key, value any) any {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.values[key]; ok {
		return v
	}
	if c.values == nil {
		c.values = make(map[any]any)
	}
	c.values[key] = value
	return value
}

// AfterClose registers f to run once the connection has ended and all its
// handlers have returned (for example, to drop its subscriptions). Hooks
// run in registration order on the read-loop goroutine. If the connection
// has already ended, f runs at once.
func (c *Conn) AfterClose(f func()) {
	c.mu.Lock()
	if !c.finished {
		c.onClose = append(c.onClose, f)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	f()
}

// Close closes the connection with a normal closing handshake. It does not
// wait for the connection's goroutines.
func (c *Conn) Close() error {
	c.wc.Close(websocket.StatusNormalClosure, "")
	return nil
}

// Notify queues a notification to the client. It never blocks. If the
// send queue is full the client is disconnected and Notify returns
// ErrSlowConsumer; after the connection has closed it returns ErrClosed.
func (c *Conn) Notify(method string, params any) error {
	p, err := marshalParams(params)
	if err != nil {
		return err
	}
	b, err := encodeRequest("", method, p)
	if err != nil {
		return fmt.Errorf("rpc: encode notification %s: %w", method, err)
	}
	return c.enqueue(b)
}

// enqueue hands an encoded message to the writer without blocking; a
// full queue disconnects the client.
func (c *Conn) enqueue(b []byte) error {
	switch err := c.wc.Send(b); {
	case errors.Is(err, wsconn.ErrSlowConsumer):
		return ErrSlowConsumer
	case err != nil:
		return ErrClosed
	}
	return nil
}

// shut starts an orderly close with code and reason.
func (c *Conn) shut(code websocket.StatusCode, reason string) {
	c.wc.Close(code, reason)
}

// ended runs once the connection has ended and every handler has
// returned: the AfterClose hooks, in order.
func (c *Conn) ended() {
	c.mu.Lock()
	hooks := c.onClose
	c.onClose, c.finished = nil, true
	c.mu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// handleFrame dispatches one WebSocket message: a request, a
// notification, a response to a request we sent, or a batch of those.
func (c *Conn) handleFrame(frame []byte) {
	var one [1]item // a frame of one object, the usual, decodes into it
	items, batch, fatal := decodeFrameInto(one[:0], frame, c.srv.cfg.Limits.MaxBatch)
	if fatal != nil {
		c.log.Debug("rejected message", "code", fatal.Error.Code, "err", fatal.Error.Message)
		c.reply(fatal)
		return
	}
	if !batch {
		done := c.replyAny
		if done == nil {
			done = c.replyIfAny
		}
		c.handleItem(items[0], done)
		return
	}
	b := &batchReply{c: c, out: make([]*response, len(items)), remaining: len(items)}
	for i, it := range items {
		c.handleItem(it, func(r *response) { b.done(i, r) })
	}
}

// handleItem serves one element; done receives its response (nil for
// none) exactly once, possibly on another goroutine.
func (c *Conn) handleItem(it item, done func(*response)) {
	switch {
	case it.bad != nil:
		c.log.Debug("rejected request", "code", it.bad.Error.Code, "err", it.bad.Error.Message)
		done(it.bad)
	case it.msg == nil:
		c.log.Debug("dropped an invalid response")
		done(nil)
	case it.msg.kind == kindResponse:
		c.deliver(it.msg)
		done(nil)
	default:
		c.dispatch(it.msg, done)
	}
}

// deliver hands a response to the Call waiting for it.
func (c *Conn) deliver(m *message) {
	c.mu.Lock()
	ch := c.pending[string(m.ID)]
	delete(c.pending, string(m.ID))
	c.mu.Unlock()
	if ch == nil {
		c.log.Debug("response to no pending request", "id", string(m.ID))
		return
	}
	ch <- m // buffered, one response per id
}

// dispatch runs a request or notification on its own goroutine.
func (c *Conn) dispatch(m *message, done func(*response)) {
	h := c.srv.handler(m.Method)
	if h == nil {
		if m.kind == kindNotification {
			done(nil)
			return
		}
		done(errorResponse(m.ID, Errorf(CodeMethodNotFound, "method not found: %s", m.Method)))
		return
	}
	req := &Request{Conn: c, Method: m.Method, ID: m.ID, Params: m.Params}
	if m.kind == kindNotification && c.srv.inline(m.Method) {
		// Served on the read loop, so that it takes effect before the
		// frames after it (a served task's progress before its answer).
		_, _ = c.invoke(h, req)
		done(nil)
		return
	}
	started := c.wc.Go(func(free func()) {
		res, err := c.invoke(h, req)
		if err == nil && establishes(req.Method) {
			c.wc.Establish()
		}
		free() // before the answer: see wsconn.Conn.Go
		switch {
		case req.IsNotification():
			done(nil)
		case err != nil:
			done(errorResponse(req.ID, toRPCError(err)))
		default:
			done(resultResponse(req.ID, res))
		}
	})
	switch {
	case started:
	case m.kind == kindNotification:
		c.log.Warn("notification dropped: too many concurrent requests", "method", m.Method)
		done(nil)
	default:
		done(errorResponse(m.ID, Errorf(CodeServerBusy, "server busy: %d requests already running on this connection", c.srv.cfg.Limits.MaxConcurrentCalls)))
	}
}

// establishes reports whether serving method successfully establishes a
// connection (Limits.InitTimeout): initialize, which comes first on every
// listener.
func establishes(method string) bool {
	return method == MethodInitialize
}

// invoke runs a handler, turning a panic into an internal error.
func (c *Conn) invoke(h HandlerFunc, req *Request) (res any, err error) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("method handler panicked", "method", req.Method, "panic", p, "stack", string(debug.Stack()))
			res, err = nil, Errorf(CodeInternalError, "internal error")
		}
	}()
	return h(c.wc.Context(), req)
}

func (c *Conn) reply(r *response) {
	_ = c.enqueue(encodeResponse(r))
}

// replyIfAny replies r unless it is nil: the done of a frame's single
// item.
func (c *Conn) replyIfAny(r *response) {
	if r != nil {
		c.reply(r)
	}
}

// batchReply collects a batch's responses and sends them as one array
// once the last element is done. A batch with nothing to answer (all
// notifications or responses) sends nothing.
type batchReply struct {
	c         *Conn
	mu        sync.Mutex
	out       []*response
	remaining int
}

func (b *batchReply) done(i int, r *response) {
	b.mu.Lock()
	b.out[i] = r
	b.remaining--
	last := b.remaining == 0
	b.mu.Unlock()
	if !last {
		return
	}
	out := make([]*response, 0, len(b.out))
	for _, r := range b.out {
		if r != nil {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return
	}
	msg, err := marshal(out)
	if err != nil {
		b.c.log.Error("encode batch response", "err", err)
		return
	}
	_ = b.c.enqueue(msg)
}
