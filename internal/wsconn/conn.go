package wsconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/internal/workers"
)

// Conn is one WebSocket connection of a Hub: it owns the socket, the send
// queue, the writer and pinger goroutines, the jobs started with Go, and
// the init deadline. See the package doc for its life.
type Conn struct {
	hub     *Hub
	id      uint64
	remote  string
	log     *slog.Logger
	limits  Limits
	ws      *websocket.Conn
	netConn net.Conn   // the hijacked connection, to force a stuck close
	batch   *BatchConn // over netConn: the writer's bursts go out in one write
	handler Handler
	ticket  *ticket // guarded by hub.mu

	ctx    context.Context // ends when the connection starts closing
	cancel context.CancelFunc
	send   chan []byte
	jobs   chan struct{} // one per job running (Go)
	pool   *workers.Pool // runs the jobs, reusing a goroutine that waits

	wg sync.WaitGroup

	mu          sync.Mutex
	closing     bool
	closeCode   websocket.StatusCode
	closeWhy    string
	abrupt      bool // close without the closing handshake
	quick       bool // a closing handshake bounded by quickClose, not WriteTimeout
	established bool
	initTimer   *time.Timer
}

// quickClose bounds the closing handshake with a client closed for
// holding a slot without establishing itself: it has its close reason,
// and an idle flood must not keep sockets for WriteTimeout each.
const quickClose = time.Second

func newConn(h *Hub, id uint64, remote string) *Conn {
	ctx, cancel := context.WithCancel(context.Background())
	l := h.cfg.Limits
	c := &Conn{
		hub:    h,
		id:     id,
		remote: remote,
		log:    h.cfg.Logger.With("client", id, "remote_addr", remote),
		limits: l,
		ctx:    ctx,
		cancel: cancel,
		send:   make(chan []byte, l.SendQueue),
		jobs:   make(chan struct{}, l.MaxConcurrentCalls),
	}
	c.pool = workers.New(&c.wg, ctx.Done(), 0)
	return c
}

// ID returns the connection's number, unique within its Hub.
func (c *Conn) ID() uint64 { return c.id }

// RemoteAddr returns the client's network address as the HTTP server saw
// it.
func (c *Conn) RemoteAddr() string { return c.remote }

// Context returns a context that ends when the connection starts closing.
func (c *Conn) Context() context.Context { return c.ctx }

// Logger returns the connection's logger (with its "client" and
// "remote_addr").
func (c *Conn) Logger() *slog.Logger { return c.log }

// Send queues an encoded message (sent as a text message) without
// blocking. A full queue disconnects the client and returns
// ErrSlowConsumer; once the connection is closing Send returns ErrClosed.
func (c *Conn) Send(b []byte) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	select {
	case c.send <- b:
		return nil
	default:
		if c.shut(websocket.StatusPolicyViolation, "slow consumer: send queue full", true, false) {
			c.log.Warn("slow client disconnected", "reason", "send queue full", "queued", len(c.send))
		}
		return ErrSlowConsumer
	}
}

// Queued returns how many messages wait in the send queue, and its
// capacity.
func (c *Conn) Queued() (n, capacity int) { return len(c.send), cap(c.send) }

// Go runs f on a goroutine of the connection if fewer than
// Limits.MaxConcurrentCalls are running, and reports whether it did. Call
// it from Handler.Frame or from a job: the connection ends only once
// every job has returned, so f must watch Context. A panic in f is logged
// and ends f only.
//
// f holds its place among the MaxConcurrentCalls until it returns or
// calls free, whichever is first. A job that answers a request calls free
// before it queues the answer: a client that sends its next request once
// it has the answer must find the place free, not be refused because the
// goroutine that answered has not yet returned.
func (c *Conn) Go(f func(free func())) bool {
	select {
	case c.jobs <- struct{}{}:
	default:
		return false
	}
	c.pool.Go(func() {
		held := true // only this goroutine reads or writes it
		free := func() {
			if held {
				held = false
				<-c.jobs
			}
		}
		defer free()
		defer func() {
			if p := recover(); p != nil {
				c.log.Error("connection job panicked", "panic", p, "stack", string(debug.Stack()))
			}
		}()
		f(free)
	})
	return true
}

// Close starts an orderly close with code and reason: what is queued is
// still written (within WriteTimeout), then the closing handshake. It
// does not wait, and reports whether this call started the close.
func (c *Conn) Close(code websocket.StatusCode, reason string) bool {
	return c.shut(code, reason, false, false)
}

// Establish marks the connection as established: it is no longer closed
// by the init deadline or evicted to make room. Later calls do nothing.
func (c *Conn) Establish() {
	c.mu.Lock()
	if c.established {
		c.mu.Unlock()
		return
	}
	c.established = true
	c.mu.Unlock()
	c.hub.establish(c)
}

// Established reports whether Establish has been called.
func (c *Conn) Established() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.established
}

// shut starts closing the connection once; later calls do nothing and
// return false. An abrupt close skips the closing handshake and unblocks
// a writer stuck on a client that does not read; quick bounds the
// closing handshake by quickClose.
func (c *Conn) shut(code websocket.StatusCode, reason string, abrupt, quick bool) bool {
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

// evict closes a connection the Hub takes the slot of. It runs under
// hub.mu.
func (c *Conn) evict(reason string) {
	if c.shut(websocket.StatusPolicyViolation, reason, false, true) {
		c.log.Info("client evicted", "reason", reason)
	}
}

// serve is the read loop. It returns once the connection has ended,
// every goroutine it started has returned and Handler.Ended has run.
func (c *Conn) serve() {
	c.wg.Go(c.writeLoop)
	if c.limits.PingInterval > 0 {
		c.wg.Go(c.pingLoop)
	}
	c.mu.Lock()
	c.initTimer = time.AfterFunc(c.limits.InitTimeout, c.initExpired)
	c.mu.Unlock()
	var r Reader
	for {
		// Not c.ctx: cancelling a read context makes the library drop the
		// connection at once. The writer closes the connection instead,
		// which ends this read.
		_, frame, err := r.Read(context.Background(), c.ws)
		if err != nil {
			c.readFailed(err)
			break
		}
		c.handler.Frame(frame)
	}
	c.wg.Wait()
	c.mu.Lock()
	c.initTimer.Stop()
	c.mu.Unlock()
	if c.handler.Ended != nil {
		c.handler.Ended()
	}
}

// initExpired closes the connection if it has not established itself
// within Limits.InitTimeout; with a job of its own running it looks again
// one InitTimeout later.
func (c *Conn) initExpired() {
	c.mu.Lock()
	if c.established || c.closing {
		c.mu.Unlock()
		return
	}
	if len(c.jobs) > 0 {
		c.initTimer.Reset(c.limits.InitTimeout)
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	if c.shut(websocket.StatusPolicyViolation, fmt.Sprintf(c.hub.cfg.InitDeadline, c.limits.InitTimeout), false, true) {
		c.log.Info("client closed: not established in time", "timeout", c.limits.InitTimeout)
	}
}

func (c *Conn) readFailed(err error) {
	switch {
	case errors.Is(err, websocket.ErrMessageTooBig):
		// The library has already sent close status 1009.
		c.log.Warn("client sent an oversize message; disconnected", "limit", c.limits.MaxMessageBytes)
		c.shut(websocket.StatusMessageTooBig, "message too big", true, false)
	case c.ctx.Err() != nil:
		// We are closing; this read ended because of it.
	default:
		c.log.Debug("client read ended", "err", err)
		c.shut(websocket.StatusNormalClosure, "", true, false)
	}
}

// writeLoop is the connection's only writer of messages. When the
// connection starts closing it closes the WebSocket, which also ends the
// read loop.
func (c *Conn) writeLoop() {
	defer c.closeWS()
	for {
		select {
		case <-c.ctx.Done():
			c.drain()
			return
		case b := <-c.send:
			if err := c.writeBurst(b); err != nil {
				if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
					if c.shut(websocket.StatusPolicyViolation, "slow consumer: write timeout", true, false) {
						c.log.Warn("slow client disconnected", "reason", "write timeout", "timeout", c.limits.WriteTimeout)
					}
				} else if c.shut(websocket.StatusInternalError, "write failed", true, false) {
					c.log.Debug("client write failed", "err", err)
				}
				return
			}
		}
	}
}

// writeBurst writes b and whatever else is queued by now (up to a
// queue's worth), each as a message of its own but in as few system calls
// as the BatchConn allows, all within one WriteTimeout. A burst is what
// many subscribers' deliveries or a client's many answers look like; one
// write each would cost a system call per message.
func (c *Conn) writeBurst(b []byte) error {
	// Not c.ctx: a write cancelled half way drops the connection; let it
	// finish (or time out) instead. Under a BatchConn the connection's
	// write deadline bounds the burst, and the library needs no context
	// of its own (which would cost a timer per message).
	deadline := time.Now().Add(c.limits.WriteTimeout)
	ctx := context.Background()
	if c.batch != nil {
		c.batch.Hold(deadline)
	} else {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	err := c.ws.Write(ctx, websocket.MessageText, b)
	if len(c.send) == 0 {
		// The writer woke for one message; its senders are often about
		// to queue more (a fan-out, many answers). Let them run first.
		runtime.Gosched()
	}
	for n := len(c.send); err == nil && n > 0; n-- {
		select {
		case b = <-c.send:
			err = c.ws.Write(ctx, websocket.MessageText, b)
		default:
			n = 0
		}
	}
	if c.batch != nil {
		if rerr := c.batch.Release(); err == nil {
			err = rerr
		}
	}
	if err != nil && (ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded)) {
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

// drain writes what is still queued when an orderly close begins (a
// handler's last notification, say), all within one WriteTimeout.
func (c *Conn) drain() {
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

// closeWS ends the WebSocket: with the closing handshake for an orderly
// close, bounded by WriteTimeout (after which the raw connection is
// closed under it), or at once for an abrupt one.
func (c *Conn) closeWS() {
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
func (c *Conn) pingLoop() {
	t := time.NewTicker(c.limits.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			// Not c.ctx, for the same reason as in writeLoop; a ping ends
			// when the connection closes anyway.
			ctx, cancel := context.WithTimeout(context.Background(), c.limits.PingInterval)
			err := c.ws.Ping(ctx)
			cancel()
			if err != nil {
				if c.ctx.Err() == nil && c.shut(websocket.StatusPolicyViolation, "ping timeout", true, false) {
					c.log.Warn("client missed a ping; disconnected", "err", err)
				}
				return
			}
		}
	}
}
