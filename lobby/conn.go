package lobby

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/protocol"
)

// conn is one lobby client connection. Its goroutines, as for the
// bus's Conn: the read loop (the HTTP handler's goroutine), one writer,
// one pinger when Limits.PingInterval > 0, and one per REQUEST or
// DISCOVER_SERVICES in flight (at most Limits.MaxConcurrentCalls). The
// read loop starts the others and waits for them before it returns;
// Lobby.Close waits for the read loops.
//
// Outgoing messages go through a bounded queue drained by the writer. A
// full queue, or a write that misses Limits.WriteTimeout, disconnects the
// client: the lobby never waits for a slow reader.
type conn struct {
	l       *Lobby
	id      uint64
	ws      *websocket.Conn
	netConn net.Conn
	log     *slog.Logger
	limits  Limits

	ctx    context.Context // ends when the connection starts closing
	cancel context.CancelFunc
	send   chan []byte
	slots  chan struct{}
	wg     sync.WaitGroup

	mu        sync.Mutex
	closing   bool
	closeCode websocket.StatusCode
	closeWhy  string
	abrupt    bool
	quick     bool // see Conn.quick
	initTimer *time.Timer

	// ticket is the connection's place in the lobby's admission;
	// established is set once an agent is attached to it (see
	// Limits.InitTimeout). Guarded by l.mu.
	ticket      *ticket
	established bool

	// agent is the agent id this connection serves, "" until a REGISTER
	// or a message with a valid auth_token binds it. Guarded by l.mu.
	agent string
}

// enqueue hands an encoded message to the writer without blocking. A full
// queue disconnects the client.
func (c *conn) enqueue(b []byte) error {
	if c.ctx.Err() != nil {
		return errClosed
	}
	select {
	case c.send <- b:
		return nil
	default:
		if c.shut(websocket.StatusPolicyViolation, "slow consumer: send queue full", true) {
			c.log.Warn("slow lobby client disconnected", "reason", "send queue full", "queued", len(c.send))
		}
		return errSlowConsumer
	}
}

// sendMsg encodes and queues m.
func (c *conn) sendMsg(m *Message) error {
	b, err := encodeMessage(m)
	if err != nil {
		c.log.Error("encode lobby message", "type", m.MessageType, "err", err)
		return err
	}
	return c.enqueue(b)
}

// shut starts closing the connection once; see Conn.shut.
func (c *conn) shut(code websocket.StatusCode, reason string, abrupt bool) bool {
	return c.shutMode(code, reason, abrupt, false)
}

// shutMode is shut; see Conn.shutMode.
func (c *conn) shutMode(code websocket.StatusCode, reason string, abrupt, quick bool) bool {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return false
	}
	c.closing = true
	c.closeCode, c.closeWhy, c.abrupt, c.quick = code, reason, abrupt, quick
	c.mu.Unlock()
	c.cancel()
	if abrupt {
		_ = c.ws.CloseNow()
	}
	return true
}

// serve is the read loop. It returns once the connection has ended and
// every goroutine it started has returned.
func (c *conn) serve() {
	c.wg.Go(c.writeLoop)
	if c.limits.PingInterval > 0 {
		c.wg.Go(c.pingLoop)
	}
	c.mu.Lock()
	c.initTimer = time.AfterFunc(c.limits.InitTimeout, c.initExpired)
	c.mu.Unlock()
	for {
		_, frame, err := c.ws.Read(context.Background())
		if err != nil {
			c.readFailed(err)
			break
		}
		c.handle(frame)
	}
	c.wg.Wait()
	c.mu.Lock()
	c.initTimer.Stop()
	c.mu.Unlock()
	c.l.connEnded(c)
	c.log.Debug("lobby client disconnected")
}

// handle serves one message on the read loop, turning a panic into an
// ERROR for the sender: one bad message never ends the connection.
func (c *conn) handle(frame []byte) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("lobby message handler panicked", "panic", p, "stack", string(debug.Stack()))
			c.l.sendError(c, nil, protocol.Errorf(protocol.CodeInternalError, "internal error"))
		}
	}()
	c.l.handleFrame(c, frame)
}

// spawn runs f on its own goroutine if a slot is free, and reports whether
// it did.
func (c *conn) spawn(f func()) bool {
	select {
	case c.slots <- struct{}{}:
	default:
		return false
	}
	c.wg.Go(func() {
		defer func() { <-c.slots }()
		defer func() {
			if p := recover(); p != nil {
				c.log.Error("lobby request panicked", "panic", p, "stack", string(debug.Stack()))
			}
		}()
		f()
	})
	return true
}

// initExpired closes the connection if no agent has attached to it within
// Limits.InitTimeout (a REGISTER, or a message with a valid auth_token);
// with a request of its own being served it looks again later.
func (c *conn) initExpired() {
	c.l.mu.Lock()
	established := c.established
	c.l.mu.Unlock()
	c.mu.Lock()
	if established || c.closing {
		c.mu.Unlock()
		return
	}
	if len(c.slots) > 0 {
		c.initTimer.Reset(c.limits.InitTimeout)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if c.shutMode(websocket.StatusPolicyViolation, fmt.Sprintf("register deadline: no REGISTER or authenticated message within %v", c.limits.InitTimeout), false, true) {
		c.log.Info("lobby client closed: not registered in time", "timeout", c.limits.InitTimeout)
	}
}

// evict closes a connection the lobby takes the slot of. It runs under
// l.mu.
func (c *conn) evict(reason string) {
	if c.shutMode(websocket.StatusPolicyViolation, reason, false, true) {
		c.log.Info("lobby client evicted", "reason", reason)
	}
}

func (c *conn) readFailed(err error) {
	switch {
	case errors.Is(err, websocket.ErrMessageTooBig):
		c.log.Warn("lobby client sent an oversize message; disconnected", "limit", c.limits.MaxMessageBytes)
		c.shut(websocket.StatusMessageTooBig, "message too big", true)
	case c.ctx.Err() != nil:
	default:
		c.log.Debug("lobby client read ended", "err", err)
		c.shut(websocket.StatusNormalClosure, "", true)
	}
}

// writeLoop is the connection's only writer; see Conn.writeLoop.
func (c *conn) writeLoop() {
	defer c.closeWS()
	for {
		select {
		case <-c.ctx.Done():
			c.drain()
			return
		case b := <-c.send:
			ctx, cancel := context.WithTimeout(context.Background(), c.limits.WriteTimeout)
			err := c.ws.Write(ctx, websocket.MessageText, b)
			timedOut := ctx.Err() != nil
			cancel()
			if err != nil {
				if timedOut && c.shut(websocket.StatusPolicyViolation, "slow consumer: write timeout", true) {
					c.log.Warn("slow lobby client disconnected", "reason", "write timeout", "timeout", c.limits.WriteTimeout)
				} else if c.shut(websocket.StatusInternalError, "write failed", true) {
					c.log.Debug("lobby client write failed", "err", err)
				}
				return
			}
		}
	}
}

// drain writes what is still queued when an orderly close begins.
func (c *conn) drain() {
	c.mu.Lock()
	abrupt := c.abrupt
	c.mu.Unlock()
	if abrupt {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.limits.WriteTimeout)
	defer cancel()
	for {
		select {
		case b := <-c.send:
			if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
				return
			}
		default:
			return
		}
	}
}

// closeWS ends the WebSocket; see Conn.closeWS.
func (c *conn) closeWS() {
	c.mu.Lock()
	code, why, abrupt, quick := c.closeCode, c.closeWhy, c.abrupt, c.quick
	c.mu.Unlock()
	if abrupt {
		_ = c.ws.CloseNow()
		return
	}
	if c.netConn != nil {
		wait := c.limits.WriteTimeout
		if quick {
			wait = min(wait, quickClose)
		}
		t := time.AfterFunc(wait, func() { _ = c.netConn.Close() })
		defer t.Stop()
	}
	_ = c.ws.Close(code, why)
}

// pingLoop pings the client every PingInterval and disconnects it if a
// pong does not come back within the interval.
func (c *conn) pingLoop() {
	t := time.NewTicker(c.limits.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), c.limits.PingInterval)
			err := c.ws.Ping(ctx)
			cancel()
			if err != nil {
				if c.ctx.Err() == nil && c.shut(websocket.StatusPolicyViolation, "ping timeout", true) {
					c.log.Warn("lobby client missed a ping; disconnected", "err", err)
				}
				return
			}
		}
	}
}
