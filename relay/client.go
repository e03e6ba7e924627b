package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/protocol"
)

// Client is a JSON-RPC 2.0 over WebSocket client for a node's local API or
// a relay. It is safe for concurrent use.
type Client struct {
	ws     *websocket.Conn
	onNote func(method string, params json.RawMessage)
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	wmu sync.Mutex

	mu       sync.Mutex
	nextID   int64
	pending  map[string]chan *response
	progress map[string]func(*protocol.Response)
	err      error
}

// ClientOption configures a client.
type ClientOption func(*Client)

// WithNotificationHandler receives every server notification other than
// mesh.progress. It runs on the client's read goroutine and must not block.
func WithNotificationHandler(f func(method string, params json.RawMessage)) ClientOption {
	return func(c *Client) { c.onNote = f }
}

// Dial connects to a server at a ws:// or wss:// URL. If nothing listens
// there the error wraps ErrNoServer.
func Dial(ctx context.Context, url string, opts ...ClientOption) (*Client, error) {
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		if isConnRefused(err) {
			return nil, fmt.Errorf("%w at %s", ErrNoServer, url)
		}
		return nil, fmt.Errorf("relay: dial %s: %w", url, err)
	}
	ws.SetReadLimit(64 << 20)
	cctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		ws:       ws,
		ctx:      cctx,
		cancel:   cancel,
		done:     make(chan struct{}),
		pending:  make(map[string]chan *response),
		progress: make(map[string]func(*protocol.Response)),
	}
	for _, o := range opts {
		o(c)
	}
	go c.readLoop()
	return c, nil
}

func isConnRefused(err error) bool {
	var op *net.OpError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &op) && op.Op == "dial")
}

// Close closes the connection and waits for the read goroutine.
func (c *Client) Close() error {
	c.cancel()
	err := c.ws.Close(websocket.StatusNormalClosure, "")
	<-c.done
	return err
}

func (c *Client) readLoop() {
	defer close(c.done)
	for {
		_, msg, err := c.ws.Read(c.ctx)
		if err != nil {
			c.fail(err)
			return
		}
		c.handle(msg)
	}
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = fmt.Errorf("relay: connection closed: %w", err)
	}
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
}

func (c *Client) handle(msg []byte) {
	if len(msg) > 0 && msg[0] == '[' {
		var batch []json.RawMessage
		if json.Unmarshal(msg, &batch) == nil {
			for _, m := range batch {
				c.handle(m)
			}
		}
		return
	}
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
		Result json.RawMessage `json:"result"`
		Error  *Error          `json:"error"`
	}
	if json.Unmarshal(msg, &m) != nil {
		return
	}
	if m.Method != "" {
		if m.Method == "mesh.progress" {
			var p struct {
				RequestID json.RawMessage    `json:"requestId"`
				Response  *protocol.Response `json:"response"`
			}
			if json.Unmarshal(m.Params, &p) == nil && p.Response != nil {
				c.mu.Lock()
				f := c.progress[string(p.RequestID)]
				c.mu.Unlock()
				if f != nil {
					f(p.Response)
				}
			}
			return
		}
		if c.onNote != nil {
			c.onNote(m.Method, m.Params)
		}
		return
	}
	c.mu.Lock()
	ch := c.pending[string(m.ID)]
	delete(c.pending, string(m.ID))
	c.mu.Unlock()
	if ch != nil {
		ch <- &response{ID: m.ID, Result: m.Result, Error: m.Error}
	}
}

// Call invokes method with params and decodes the result into result (if
// non-nil). A JSON-RPC error is returned as *Error.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	return c.call(ctx, method, params, result, nil)
}

func (c *Client) call(ctx context.Context, method string, params, result any, progress func(*protocol.Response)) error {
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return err
	}
	c.nextID++
	id := strconv.FormatInt(c.nextID, 10)
	ch := make(chan *response, 1)
	c.pending[id] = ch
	if progress != nil {
		c.progress[id] = progress
	}
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, id)
		delete(c.progress, id)
		c.mu.Unlock()
	}()
	msg, err := json.Marshal(struct {
		JSONRPC string `json:"jsonrpc"`
		ID      int64  `json:"id"`
		Method  string `json:"method"`
		Params  any    `json:"params,omitempty"`
	}{"2.0", c.nextIDValue(id), method, params})
	if err != nil {
		return fmt.Errorf("relay: encode params: %w", err)
	}
	c.wmu.Lock()
	err = c.ws.Write(ctx, websocket.MessageText, msg)
	c.wmu.Unlock()
	if err != nil {
		return fmt.Errorf("relay: send: %w", err)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			c.mu.Lock()
			err := c.err
			c.mu.Unlock()
			return err
		}
		if r.Error != nil {
			return r.Error
		}
		if result != nil {
			if err := json.Unmarshal(r.Result, result); err != nil {
				return fmt.Errorf("relay: decode result of %s: %w", method, err)
			}
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) nextIDValue(id string) int64 {
	n, _ := strconv.ParseInt(id, 10, 64)
	return n
}

// MeshCall runs mesh.call. In-progress responses go to onProgress (which
// runs on the read goroutine and must not block). An AgentProtocol failure
// is returned as a *protocol.Error, so callers branch on its Code.
func (c *Client) MeshCall(ctx context.Context, req protocol.CallRequest, onProgress func(*protocol.Response)) (*protocol.Response, error) {
	params := CallParams{AgentID: req.To, Capability: req.Action, Params: req.Params, TimeoutMS: req.Timeout.Milliseconds()}
	if req.Timeout > 0 {
		// Leave the node time to report its own TIMEOUT before ours fires.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, req.Timeout+5*time.Second)
		defer cancel()
	}
	var resp protocol.Response
	err := c.call(ctx, "mesh.call", params, &resp, onProgress)
	if err != nil {
		if pe := AsProtocolError(err); pe != nil {
			return nil, pe
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, protocol.Errorf(protocol.CodeTimeout, "no answer from the node within %s", req.Timeout)
		}
		return nil, err
	}
	return &resp, nil
}

// Peers runs mesh.peers.
func (c *Client) Peers(ctx context.Context) ([]protocol.PeerInfo, error) {
	var out []protocol.PeerInfo
	err := c.Call(ctx, "mesh.peers", nil, &out)
	return out, err
}
