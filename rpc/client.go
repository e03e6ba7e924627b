package rpc

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/meshagent/meshagent/internal/workers"
	"github.com/meshagent/meshagent/internal/wsconn"
	"github.com/meshagent/meshagent/protocol"
)

// Client is a JSON-RPC 2.0 over WebSocket client of a node's local API or
// a relay. It is safe for concurrent use. Its goroutines (one reader, and
// one per server-initiated request being served, which waits briefly for
// the next request once its own is answered) end before Close returns.
type Client struct {
	cfg    ClientConfig
	url    string
	init   InitializeResult // set by Dial before the client is shared
	ws     *websocket.Conn
	ctx    context.Context // ends on Close or when the connection is lost
	cancel context.CancelFunc
	writer clientWriter
	reqs   chan struct{} // bounds server-initiated requests served at once
	pool   *workers.Pool // serves them, reusing a goroutine that waits
	wg     sync.WaitGroup

	mu      sync.Mutex
	nextID  int64
	pending map[int64]*pendingCall
	err     error // why the connection ended; set once

	// topics are the mesh.subscribe subscriptions, touched only on the
	// read goroutine (see Subscribe).
	topics topicRouter

	closeOnce sync.Once
}

type pendingCall struct {
	ch chan *message // buffered 1
	callHooks
	// abandoned is set (under Client.mu) when the caller gave up on a
	// call with an orphan hook, which stays pending for its response.
	abandoned bool
}

// callHooks receive the notifications a server sends about one call
// before its response. They run on the read goroutine and must not block.
type callHooks struct {
	progress   func(*protocol.Response)
	discovered func(protocol.PeerInfo)
	// response sees the response on the read goroutine before the caller
	// does, so that what it sets up is in place for the frames after it.
	response func(*message)
	// orphan, if set, sees the response instead of response when the
	// caller's context ended first (for example to undo what the server
	// did). Such a call stays pending until its response arrives or the
	// connection ends.
	orphan func(*message)
}

// maxClientRequests bounds the server-initiated requests a client serves
// at once; more are answered with CodeServerBusy.
const maxClientRequests = 64

// Dial connects to a server and initializes (seed 001: initialize comes
// first, and the server answers nothing else before it), as the
// WithClientID id or a fresh "meshagent-go-…" one. url is a ws:// or
// wss:// URL, or a bare host:port, read as ws://host:port/; a token goes
// in its query (?token=…) or in an Authorization header (WithHTTPHeader).
// If nothing listens there the error wraps ErrNoServer; a refused
// initialize is returned as its *Error, wrapped.
func Dial(ctx context.Context, url string, opts ...ClientOption) (*Client, error) {
	cfg := defaultClientConfig()
	for i, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("rpc: client option %d: %w", i, err)
		}
	}
	url = NormalizeURL(url)
	var batch *wsconn.BatchConn
	dopts := &websocket.DialOptions{
		HTTPHeader:      cfg.HTTPHeader,
		CompressionMode: websocket.CompressionDisabled,
		HTTPClient:      &http.Client{Transport: batchingTransport(cfg.TLSConfig, &batch)},
	}
	ws, resp, err := websocket.Dial(ctx, url, dopts)
	if err != nil {
		// The HTTP client's errors name the URL, token and all.
		err = redactedError{err: err, url: url}
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return nil, fmt.Errorf("%w at %s: %w", ErrNoServer, RedactURL(url), err)
		case resp != nil && resp.StatusCode == http.StatusUnauthorized:
			return nil, fmt.Errorf("%w at %s: the token is missing or not one the server holds (HTTP 401)", ErrUnauthorized, RedactURL(url))
		}
		return nil, fmt.Errorf("rpc: dial %s: %w", RedactURL(url), err)
	}
	ws.SetReadLimit(cfg.ReadLimit)
	cctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		cfg:     cfg,
		url:     url,
		ws:      ws,
		ctx:     cctx,
		cancel:  cancel,
		reqs:    make(chan struct{}, maxClientRequests),
		pending: make(map[int64]*pendingCall),
	}
	c.writer.batch = batch
	c.pool = workers.New(&c.wg, cctx.Done(), 0)
	c.topics.answer = c.answer
	c.wg.Go(c.readLoop)
	if cfg.NoInitialize {
		return c, nil
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "meshagent-go-" + randomHex(6)
		c.cfg.ClientID = cfg.ClientID
	}
	info := cfg.ClientInfo
	if info.Name == "" {
		info = ClientInfo{Name: "meshagent-go", Version: protocol.HelloVersion}
	}
	if err := c.Call(ctx, MethodInitialize, InitializeParams{ClientID: cfg.ClientID, ClientInfo: info}, &c.init); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("rpc: initialize at %s as %q: %w", RedactURL(url), cfg.ClientID, err)
	}
	return c, nil
}

// ClientID returns the id the client initialized with, or "" if it was
// dialled WithoutInitialize.
func (c *Client) ClientID() string {
	if c.cfg.NoInitialize {
		return ""
	}
	return c.cfg.ClientID
}

// ServerID returns the serverId of the server's initialize result, or ""
// if the client was dialled WithoutInitialize.
func (c *Client) ServerID() string { return c.init.ServerID }

// RedactURL is raw with its token (the query's "token") and any password
// replaced by "xxxxx", for messages and logs, which are shared where a
// credential must not be.
func RedactURL(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil {
		return "(a URL that does not parse)"
	}
	if q := u.Query(); q.Has("token") {
		q.Set("token", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// redactedError is err with the token of url redacted from its message,
// as RedactURL does.
type redactedError struct {
	err error
	url string
}

func (e redactedError) Error() string {
	msg := e.err.Error()
	if u, err := neturl.Parse(e.url); err == nil {
		if token := u.Query().Get("token"); token != "" {
			msg = strings.ReplaceAll(msg, neturl.QueryEscape(token), "xxxxx")
			msg = strings.ReplaceAll(msg, token, "xxxxx")
		}
	}
	return msg
}

func (e redactedError) Unwrap() error { return e.err }

// NormalizeURL turns a bare host:port into ws://host:port/ and leaves
// anything with a scheme alone (adding the path "/" if it has none, before
// a query such as ?token=…).
func NormalizeURL(s string) string {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, "://") {
		s = "ws://" + s
	}
	scheme, rest, _ := strings.Cut(s, "://")
	if !strings.Contains(rest, "/") {
		host, query, ok := strings.Cut(rest, "?")
		rest = host + "/"
		if ok {
			rest += "?" + query
		}
	}
	return scheme + "://" + rest
}

// URL returns the URL the client dialled.
func (c *Client) URL() string { return c.url }

// Close closes the connection with a normal closing handshake and waits
// for the client's goroutines. Pending calls fail with an error wrapping
// ErrClosed. Close always returns nil; Err reports how the connection
// ended.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.fail(errors.New("client closed"))
		_ = c.ws.Close(websocket.StatusNormalClosure, "")
		c.wg.Wait()
	})
	return nil
}

// Done returns a channel closed when the connection has ended (Close, or
// the server went away).
func (c *Client) Done() <-chan struct{} { return c.ctx.Done() }

// Err returns why the connection ended (wrapping ErrClosed), or nil while
// it is up.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// fail records why the connection ended, once, and wakes every pending
// call.
func (c *Client) fail(cause error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = fmt.Errorf("%w: %w", ErrClosed, cause)
	}
	c.mu.Unlock()
	c.cancel()
}

func (c *Client) readLoop() {
	var r wsconn.Reader
	for {
		_, frame, err := r.Read(context.Background(), c.ws)
		if err != nil {
			c.fail(err)
			_ = c.ws.CloseNow()
			return
		}
		c.handleFrame(frame)
	}
}

func (c *Client) handleFrame(frame []byte) {
	frame = trimJSONSpace(frame)
	if len(frame) > 0 && frame[0] == '[' {
		var elems []jsontext.Value
		if jsonv2.Unmarshal(frame, &elems, frameOpts) != nil {
			return
		}
		for _, e := range elems {
			if it, err := decodeObject(e); err == nil {
				c.handleItem(it)
			}
		}
		return
	}
	if it, err := decodeObject(frame); err == nil {
		c.handleItem(it)
	}
}

func (c *Client) handleItem(it item) {
	if it.msg == nil {
		if it.bad != nil && !isNull(it.bad.ID) {
			// A malformed request from the server that still has an id.
			c.send(it.bad)
		}
		return
	}
	m := it.msg
	switch m.kind {
	case kindResponse:
		id, err := strconv.ParseInt(string(m.ID), 10, 64)
		if err != nil {
			return
		}
		c.mu.Lock()
		p := c.pending[id]
		abandoned := p != nil && p.abandoned
		delete(c.pending, id)
		c.mu.Unlock()
		switch {
		case p == nil:
		case abandoned:
			p.orphan(m)
		default:
			if p.response != nil {
				p.response(m)
			}
			p.ch <- m
		}
	case kindNotification:
		if m.Method == MethodMeshProgress {
			c.progress(m.Params)
			return
		}
		if m.Method == MethodMeshDiscovered {
			c.discovered(m.Params)
			return
		}
		if m.Method == MethodMeshMessage {
			c.topics.deliver(m.Params, nil)
			return
		}
		if c.cfg.OnNotification != nil {
			c.cfg.OnNotification(m.Method, m.Params)
		}
	case kindRequest:
		if m.Method == MethodMeshMessage {
			c.topics.deliver(m.Params, m.ID)
			return
		}
		c.serveRequest(m)
	}
}

// pendingFor returns the call a notification's requestId names, or nil.
func (c *Client) pendingFor(requestID json.RawMessage) *pendingCall {
	id, err := strconv.ParseInt(string(requestID), 10, 64)
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending[id]
}

// progress routes a mesh.progress notification to its call. It runs on
// the read goroutine, so it precedes the call's final response.
func (c *Client) progress(params json.RawMessage) {
	var p ProgressParams
	if json.Unmarshal(params, &p) != nil || p.Response == nil {
		return
	}
	if pc := c.pendingFor(p.RequestID); pc != nil && pc.progress != nil {
		pc.progress(p.Response)
	}
}

// discovered routes a mesh.discovered notification to its call.
func (c *Client) discovered(params json.RawMessage) {
	var p DiscoveredParams
	if json.Unmarshal(params, &p) != nil {
		return
	}
	if pc := c.pendingFor(p.RequestID); pc != nil && pc.discovered != nil {
		pc.discovered(p.Agent)
	}
}

// Discover runs mesh.discover for a capability (or, with byKeyword, a
// keyword). Each agent goes to onFound as soon as the node confirms it;
// the result lists them all in seed 000's SERVICES_AVAILABLE shape.
// timeout 0 means DefaultDiscoverTimeout.
func (c *Client) Discover(ctx context.Context, query string, byKeyword bool, timeout time.Duration, onFound func(protocol.PeerInfo)) (*ServicesAvailable, error) {
	p := DiscoverParams{Capability: query, TimeoutMS: timeout.Milliseconds()}
	if byKeyword {
		p = DiscoverParams{Keyword: query, TimeoutMS: timeout.Milliseconds()}
	}
	var out ServicesAvailable
	if err := c.call(ctx, MethodMeshDiscover, p, &out, callHooks{discovered: onFound}); err != nil {
		if pe := ProtocolError(err); pe != nil {
			return nil, pe
		}
		return nil, err
	}
	return &out, nil
}

// serveRequest answers a server-initiated request on a goroutine of its
// own (one of the pool's), so a slow handler never stalls the reader.
func (c *Client) serveRequest(m *message) {
	if c.cfg.OnRequest == nil {
		c.send(errorResponse(m.ID, Errorf(CodeMethodNotFound, "method not found: %s", m.Method)))
		return
	}
	select {
	case c.reqs <- struct{}{}:
	default:
		c.send(errorResponse(m.ID, Errorf(CodeServerBusy, "client busy: %d requests already running", maxClientRequests)))
		return
	}
	c.pool.Go(func() {
		res, err := c.cfg.OnRequest(c.ctx, m.Method, m.Params)
		// Free the slot before answering: the server may send its next
		// request as soon as it has the answer, and a server keeping
		// maxClientRequests outstanding must not be told the client is busy.
		<-c.reqs
		if err != nil {
			c.send(errorResponse(m.ID, toRPCError(err)))
			return
		}
		_ = c.write(c.ctx, encodeResult(m.ID, res)) // as send does
	})
}

// answer sends the response to a server request: {} for nil, else the
// error.
func (c *Client) answer(id json.RawMessage, err error) {
	if err != nil {
		c.send(errorResponse(id, toRPCError(err)))
		return
	}
	c.send(resultResponse(id, struct{}{}))
}

// send writes a response to a server request; failures end the
// connection, which the read loop reports.
func (c *Client) send(r *response) {
	_ = c.write(c.ctx, encodeResponse(r))
}

// Call invokes method with params (nil for none; otherwise anything that
// encodes to a JSON object or array) and decodes the result into result
// (if non-nil). An error response is returned as an *Error. If ctx
// ends first Call returns ctx's error; if the connection ends, an error
// wrapping ErrClosed.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	return c.call(ctx, method, params, result, callHooks{})
}

func (c *Client) call(ctx context.Context, method string, params, result any, hooks callHooks) error {
	p, err := marshalParams(params)
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.nextID++
	id := c.nextID
	pc := &pendingCall{ch: make(chan *message, 1), callHooks: hooks}
	c.pending[id] = pc
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if !pc.abandoned {
			delete(c.pending, id)
		}
		c.mu.Unlock()
	}()
	b, err := encodeRequest(strconv.FormatInt(id, 10), method, p)
	if err != nil {
		return fmt.Errorf("rpc: encode %s: %w", method, err)
	}
	if err := c.write(ctx, b); err != nil {
		return err
	}
	select {
	case m := <-pc.ch:
		return m.decodeResult(method, result)
	case <-ctx.Done():
		if hooks.orphan == nil {
			return ctx.Err()
		}
		c.mu.Lock()
		_, waiting := c.pending[id]
		if waiting {
			pc.abandoned = true
		}
		c.mu.Unlock()
		if waiting {
			return ctx.Err()
		}
		// The read goroutine has the response and is about to hand it
		// over (its response hook has run or is running): take it, so
		// that what the hook set up is not lost.
		select {
		case m := <-pc.ch:
			return m.decodeResult(method, result)
		case <-c.ctx.Done():
			return c.Err()
		}
	case <-c.ctx.Done():
		return c.Err()
	}
}

// Notify sends the server a notification (no answer comes back): a
// serving client's mesh.progress or mesh.setState, for example. A
// notification sent from an OnRequest handler reaches the server before
// that handler's answer.
func (c *Client) Notify(ctx context.Context, method string, params any) error {
	p, err := marshalParams(params)
	if err != nil {
		return err
	}
	b, err := encodeRequest("", method, p)
	if err != nil {
		return fmt.Errorf("rpc: encode %s: %w", method, err)
	}
	return c.write(ctx, b)
}

// timeoutGrace is how long MeshCall waits beyond the call's own timeout,
// so that the node reports its TIMEOUT before the client gives up.
const timeoutGrace = 5 * time.Second

// MeshCall runs mesh.call: Action on agent To with Params, bounded by
// Timeout (0: the node's default). Each in_progress response goes to
// onProgress (req.Progress if onProgress is nil) before MeshCall returns;
// it runs on the read goroutine and must not block. An AgentProtocol
// failure is returned as a *protocol.Error (errors.As works, and its Code
// is what to branch on); if no answer comes within Timeout plus a grace
// period, the error is a *protocol.Error with code TIMEOUT. Other failures
// are an *Error (bad params, for example) or a connection error.
//
// With req.Signed set, the call asks for a receipt ("receipt": true) and
// hands the provider's signed final response envelope to req.Signed
// before MeshCall returns; protocol.OpenReceipt checks it.
func (c *Client) MeshCall(ctx context.Context, req protocol.CallRequest, onProgress func(*protocol.Response)) (*protocol.Response, error) {
	if req.To == "" {
		return nil, Errorf(CodeInvalidParams, `invalid params: "agentId" is required (MeshCallAny lets the node choose)`)
	}
	res, err := c.meshCall(ctx, req, onProgress)
	if err != nil {
		return nil, err
	}
	return &res.Response, nil
}

// MeshCallAny runs mesh.call without "agentId": the node chooses a
// provider of req.Action (req.To must be empty), failing over as
// node.Node.CallAny does. It returns the response and the agent id of
// the provider that answered; errors are MeshCall's.
func (c *Client) MeshCallAny(ctx context.Context, req protocol.CallRequest, onProgress func(*protocol.Response)) (*protocol.Response, string, error) {
	if req.To != "" {
		return nil, "", Errorf(CodeInvalidParams, `invalid params: MeshCallAny chooses the agent; use MeshCall to name one`)
	}
	res, err := c.meshCall(ctx, req, onProgress)
	if err != nil {
		return nil, "", err
	}
	return &res.Response, res.AgentID, nil
}

func (c *Client) meshCall(ctx context.Context, req protocol.CallRequest, onProgress func(*protocol.Response)) (*CallResult, error) {
	if onProgress == nil {
		onProgress = req.Progress
	}
	params := CallParams{AgentID: req.To, Capability: req.Action, Params: req.Params, TaskID: req.CorrelationID, Receipt: req.Signed != nil}
	if req.Timeout > 0 {
		params.TimeoutMS = int64((req.Timeout + time.Millisecond - 1) / time.Millisecond)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout+timeoutGrace)
		defer cancel()
	}
	var res CallResult
	err := c.call(ctx, MethodMeshCall, params, &res, callHooks{progress: onProgress})
	switch {
	case err == nil:
		if req.Signed != nil && len(res.Receipt) > 0 {
			req.Signed(res.Receipt)
		}
		return &res, nil
	case errors.Is(err, context.DeadlineExceeded):
		return nil, protocol.Errorf(protocol.CodeTimeout, "no answer from %s within the deadline", c.url)
	}
	if pe := ProtocolError(err); pe != nil {
		return nil, pe
	}
	return nil, err
}

// Peers runs mesh.peers.
func (c *Client) Peers(ctx context.Context) ([]protocol.PeerInfo, error) {
	var out []protocol.PeerInfo
	if err := c.Call(ctx, MethodMeshPeers, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// AgentID runs mesh.id: the agent id of the node behind the server.
func (c *Client) AgentID(ctx context.Context) (string, error) {
	var out IDResult
	if err := c.Call(ctx, MethodMeshID, nil, &out); err != nil {
		return "", err
	}
	return out.AgentID, nil
}

// Ping runs ping and returns the server's clock.
func (c *Client) Ping(ctx context.Context) (time.Time, error) {
	var out PingResult
	if err := c.Call(ctx, MethodPing, nil, &out); err != nil {
		return time.Time{}, err
	}
	return time.Parse(time.RFC3339, out.Timestamp)
}

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b)
}
