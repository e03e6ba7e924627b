package relay

import (
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/coder/websocket"
)

// Conn is one client connection. Methods receive it so they can send
// notifications to their caller.
type Conn struct {
	id     uint64
	srv    *Server
	ws     *websocket.Conn
	remote string
	ctx    context.Context
	cancel context.CancelFunc
	send   chan []byte
	calls  chan struct{} // concurrent-call slots

	closeOnce   sync.Once
	closeCode   websocket.StatusCode
	closeReason string
	wg          sync.WaitGroup // method goroutines and the writer
}

// ID returns the connection's number, unique within the server.
func (c *Conn) ID() uint64 { return c.id }

// Notify queues a notification to the client. It never blocks: a client
// whose queue is full is disconnected (a slow consumer) and Notify returns
// ErrClosed.
func (c *Conn) Notify(method string, params any) error {
	b, err := json.Marshal(notificationMsg{JSONRPC: "2.0", Method: method, Params: params})
	if err != nil {
		return err
	}
	return c.enqueue(b)
}

func (c *Conn) enqueue(b []byte) error {
	if c.ctx.Err() != nil {
		return ErrClosed
	}
	select {
	case c.send <- b:
		return nil
	default:
		c.srv.log.Warn("slow client disconnected", "client", c.id, "remote_addr", c.remote, "queued", len(c.send))
		c.close(websocket.StatusPolicyViolation, "slow consumer: send queue full")
		return ErrClosed
	}
}

func (c *Conn) close(code websocket.StatusCode, reason string) {
	// Cancelling the context ends the read loop, which then says goodbye
	// with this code and reason once the connection's goroutines are done.
	c.closeOnce.Do(func() {
		c.closeCode, c.closeReason = code, reason
		c.cancel()
	})
}

// run is the read loop; it returns when the connection ends and all of the
// connection's goroutines have finished.
func (c *Conn) run() {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.writeLoop()
	}()
	defer func() {
		c.close(websocket.StatusNormalClosure, "")
		c.wg.Wait()
		_ = c.ws.Close(c.closeCode, c.closeReason)
		_ = c.ws.CloseNow()
		c.srv.removeConn(c)
	}()
	for {
		_, msg, err := c.ws.Read(c.ctx)
		if err != nil {
			if errors.Is(err, websocket.ErrMessageTooBig) || websocket.CloseStatus(err) == websocket.StatusMessageTooBig {
				c.srv.log.Warn("client sent an oversize message", "client", c.id, "limit", c.srv.cfg.Limits.MaxMessageBytes)
			}
			return
		}
		c.handleMessage(msg)
	}
}

func (c *Conn) writeLoop() {
	for {
		select {
		case <-c.ctx.Done():
			return
		case b := <-c.send:
			ctx, cancel := context.WithTimeout(c.ctx, c.srv.cfg.Limits.WriteTimeout)
			err := c.ws.Write(ctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				if c.ctx.Err() == nil {
					c.srv.log.Warn("client write failed; disconnecting", "client", c.id, "err", err)
				}
				c.close(websocket.StatusPolicyViolation, "write timeout")
				return
			}
		}
	}
}

// handleMessage dispatches one WebSocket message: a request or a batch.
// Requests run on their own goroutines so that a slow method never holds
// up reading; a batch's responses are sent together once all are done.
func (c *Conn) handleMessage(msg []byte) {
	reqs, batch, fatal := decodeMessage(msg, c.srv.cfg.Limits.MaxBatch)
	if fatal != nil {
		c.reply(fatal)
		return
	}
	if !batch {
		d := reqs[0]
		if d.bad != nil {
			c.reply(d.bad)
			return
		}
		c.dispatch(d.req, func(r *response) {
			if r != nil {
				c.reply(r)
			}
		})
		return
	}
	results := make([]*response, len(reqs))
	var pending sync.WaitGroup
	for i, d := range reqs {
		if d.bad != nil {
			results[i] = d.bad
			continue
		}
		pending.Add(1)
		c.dispatch(d.req, func(r *response) {
			results[i] = r
			pending.Done()
		})
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		pending.Wait()
		out := make([]*response, 0, len(results))
		for _, r := range results {
			if r != nil {
				out = append(out, r)
			}
		}
		if len(out) == 0 {
			return // a batch of notifications gets no response
		}
		b, err := json.Marshal(out)
		if err == nil {
			_ = c.enqueue(b)
		}
	}()
}

// dispatch runs one request and calls done with its response (nil for a
// notification). done is called exactly once.
func (c *Conn) dispatch(r request, done func(*response)) {
	f, ok := c.srv.methods[r.Method]
	if !ok {
		if r.notification() {
			done(nil)
		} else {
			done(errorResponse(r.ID, Errorf(CodeMethodNotFound, "method not found: %s", r.Method)))
		}
		return
	}
	select {
	case c.calls <- struct{}{}:
	default:
		if r.notification() {
			done(nil)
		} else {
			done(errorResponse(r.ID, Errorf(CodeServerBusy, "server busy: more than %d concurrent requests on this connection", cap(c.calls))))
		}
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer func() { <-c.calls }()
		ctx := c.ctx
		if !r.notification() {
			ctx = context.WithValue(ctx, requestIDKey{}, r.ID)
		}
		res, err := f(ctx, c, r.Params)
		if r.notification() {
			done(nil)
			return
		}
		if err != nil {
			done(errorResponse(r.ID, toRPCError(err)))
			return
		}
		done(resultResponse(r.ID, res))
	}()
}

func (c *Conn) reply(r *response) {
	b, err := json.Marshal(r)
	if err != nil {
		b, _ = json.Marshal(errorResponse(r.ID, Errorf(CodeInternalError, "internal error: encode response")))
	}
	_ = c.enqueue(b)
}
