package rpc

import (
	"context"
	"fmt"
	"strconv"
	"sync"
)

// Requests of the server's own to a client: Call waits for the answer;
// TryStart sends and returns, so that one goroutine can have a request
// out at many clients at once (the bus's fan-out) without a goroutine
// per request.

// PendingCall is a request TryStart sent, awaiting the client's answer.
type PendingCall struct {
	c      *Conn
	method string
	id     string
	ch     chan *message // buffered 1: the answer
	err    error         // the send failed: Wait returns it
}

// answerChans keeps the channels of answered requests for the next ones:
// a fan-out to ten subscribers otherwise makes ten channels per message.
var answerChans = sync.Pool{New: func() any { return make(chan *message, 1) }}

// answered gives p's channel back for reuse once Wait has received the
// answer from it. Only then is it known to be empty and no one's: deliver
// took it out of pending before sending its one answer, and a channel
// that was not answered may still be sent to, so it is left to the
// collector.
func answered(p *PendingCall) {
	answerChans.Put(p.ch)
	p.ch = nil
}

// Call sends the client a request and waits for its response, which it
// decodes into result (if non-nil). An error response is returned as an
// *Error. Call returns ctx's error if ctx ends first, and ErrClosed if
// the connection closes. With Limits.MaxPendingCalls requests already
// awaiting answers on this connection, Call first waits (within ctx) for
// one of them to end. Call it from a handler or any goroutine except
// an AfterClose hook.
func (c *Conn) Call(ctx context.Context, method string, params, result any) error {
	p, err := marshalParams(params)
	if err != nil {
		return err
	}
	// Back-pressure: at most MaxPendingCalls requests of ours await this
	// client's answers; the next one waits here for a slot, so a client
	// that reads slows its senders down instead of overrunning its send
	// queue.
	select {
	case c.calls <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("rpc: %s: waiting for a free slot (%d requests already awaiting answers): %w", method, cap(c.calls), ctx.Err())
	case <-c.wc.Context().Done():
		return ErrClosed
	}
	return c.start(method, p).Wait(ctx, result)
}

// TryStart sends the client a request as Call does, without waiting for
// the answer: the PendingCall's Wait does, and must be called once. When
// Limits.MaxPendingCalls requests already await answers it sends nothing
// and returns false at once: the caller then uses Call, which waits for a
// slot. An error encoding params or sending is returned by Wait.
func (c *Conn) TryStart(method string, params any) (*PendingCall, bool) {
	p, err := marshalParams(params)
	if err != nil {
		return &PendingCall{method: method, err: err}, true
	}
	select {
	case c.calls <- struct{}{}:
	default:
		return nil, false
	}
	return c.start(method, p), true
}

// start sends a request whose slot the caller holds; Wait frees it.
func (c *Conn) start(method string, params []byte) *PendingCall {
	pc := &PendingCall{c: c, method: method}
	c.mu.Lock()
	if c.wc.Context().Err() != nil {
		c.mu.Unlock()
		pc.err = ErrClosed
		return pc
	}
	c.nextID++
	pc.id = strconv.FormatInt(c.nextID, 10)
	pc.ch = answerChans.Get().(chan *message)
	if c.pending == nil {
		c.pending = make(map[string]chan *message)
	}
	c.pending[pc.id] = pc.ch
	c.mu.Unlock()
	b, err := encodeRequest(pc.id, method, params)
	if err != nil {
		pc.err = fmt.Errorf("rpc: encode request %s: %w", method, err)
		return pc
	}
	pc.err = c.enqueue(b)
	return pc
}

// Wait waits for the answer and decodes it into result (if non-nil), as
// Call does, and frees the request's slot. It returns ctx's error if ctx
// ends first and ErrClosed if the connection closes.
func (p *PendingCall) Wait(ctx context.Context, result any) error {
	c := p.c
	if c == nil { // params did not encode: nothing was sent, no slot taken
		return p.err
	}
	defer func() { <-c.calls }()
	if p.ch != nil {
		defer func() {
			c.mu.Lock()
			delete(c.pending, p.id)
			c.mu.Unlock()
		}()
	}
	if p.err != nil {
		return p.err
	}
	select {
	case m := <-p.ch:
		answered(p)
		return m.decodeResult(p.method, result)
	case <-ctx.Done():
		return ctx.Err()
	case <-c.wc.Context().Done():
		// The reader hands an answer over before it reads the close that
		// follows it: an answer the client sent before leaving counts
		// (a durable subscription's last message is not delivered again).
		select {
		case m := <-p.ch:
			return m.decodeResult(p.method, result)
		default:
			return ErrClosed
		}
	}
}
