package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
)

// caller is the requesting side of direct calls: one long-lived request
// stream per peer, opened once however many calls race for it, each with
// its pending calls and its reader goroutine, which close stops.
type caller struct {
	host host.Host
	// open verifies a response frame from a peer (Node.openFrame).
	open      func(frame []byte, from peer.ID) (*protocol.Envelope, error)
	maxFrame  int
	ioTimeout time.Duration
	log       *slog.Logger
	done      <-chan struct{} // closed when the node closes
	wg        sync.WaitGroup  // the readers

	mu      sync.Mutex
	closed  bool
	conns   map[peer.ID]*reqConn
	dialing map[peer.ID]chan struct{} // closed when an opening stream is ready
}

// conn returns the request stream to p, opening it if needed. Concurrent
// callers share one opening: the first opens the stream, the rest wait for
// it, so a burst of calls to a new peer costs one stream, not one each.
func (cl *caller) conn(ctx context.Context, p peer.ID) (*reqConn, error) {
	for {
		cl.mu.Lock()
		if cl.closed {
			cl.mu.Unlock()
			return nil, ErrClosed
		}
		if c, ok := cl.conns[p]; ok {
			cl.mu.Unlock()
			return c, nil
		}
		wait, dialing := cl.dialing[p]
		if !dialing {
			wait = make(chan struct{})
			cl.dialing[p] = wait
		}
		cl.mu.Unlock()
		if dialing {
			select {
			case <-wait:
				continue // the opener finished: use its stream or try ourselves
			case <-ctx.Done():
				return nil, protocol.Errorf(protocol.CodeTimeout, "timed out reaching agent %s", p)
			}
		}
		c, err := cl.openConn(ctx, p)
		cl.mu.Lock()
		delete(cl.dialing, p)
		close(wait)
		cl.mu.Unlock()
		return c, err
	}
}

// openConn opens the request stream to p and starts its reader.
func (cl *caller) openConn(ctx context.Context, p peer.ID) (*reqConn, error) {
	if cl.host.Network().Connectedness(p) != network.Connected && len(cl.host.Peerstore().Addrs(p)) == 0 {
		return nil, protocol.Errorf(protocol.CodeUnknownAgent, "agent %s is not connected and has no known address", p)
	}
	s, err := cl.host.NewStream(ctx, p, protocol.RequestProtocol)
	if err != nil {
		if ctx.Err() != nil {
			return nil, protocol.Errorf(protocol.CodeTimeout, "timed out reaching agent %s", p)
		}
		return nil, protocol.Errorf(protocol.CodeUnknownAgent, "cannot reach agent %s: %v", p, err)
	}
	c := &reqConn{cl: cl, peer: p, s: s, pending: make(map[string]*pendingCall)}
	cl.mu.Lock()
	if cl.closed {
		cl.mu.Unlock()
		_ = s.Reset()
		return nil, ErrClosed
	}
	cl.conns[p] = c
	cl.wg.Add(1)
	cl.mu.Unlock()
	go func() {
		defer cl.wg.Done()
		c.readLoop()
	}()
	return c, nil
}

// forget drops c from the streams in use, if it is still the one to its
// peer.
func (cl *caller) forget(c *reqConn) {
	cl.mu.Lock()
	if cl.conns[c.peer] == c {
		delete(cl.conns, c.peer)
	}
	cl.mu.Unlock()
}

// close refuses new calls, fails the pending ones with err, resets every
// stream and waits for the readers.
func (cl *caller) close(err error) {
	cl.mu.Lock()
	cl.closed = true
	conns := make([]*reqConn, 0, len(cl.conns))
	for _, c := range cl.conns {
		conns = append(conns, c)
	}
	cl.mu.Unlock()
	for _, c := range conns {
		c.close(err)
	}
	cl.wg.Wait()
}

// reqConn is the long-lived request stream to one peer, shared by every
// concurrent call to it. While several calls are pending, its reader only
// routes: it hands each response frame, unverified, to the call its
// correlation id names, and that call's own goroutine verifies and decodes
// it, so that the verifications run on every core instead of one after
// another on the reader's.
type reqConn struct {
	cl   *caller
	peer peer.ID
	s    network.Stream

	wmu sync.Mutex // serialises frame writes
	wdl writeDeadline

	mu      sync.Mutex
	pending map[string]*pendingCall
	err     error
}

type pendingCall struct {
	progress func(*protocol.Response)
	signed   func(json.RawMessage)
	// frames are response frames routed to this call by their correlation
	// id hint, not yet verified: the call's goroutine verifies them.
	frames chan []byte
	// gone is closed when the call stops waiting, so that the reader never
	// blocks on a call that timed out.
	gone chan struct{}
	// final is signalled once result is an outcome decided elsewhere: the
	// stream failed, or the reader (or another call) verified a frame the
	// hint did not route here. A call has one such outcome at most (it is
	// dropped from reqConn.pending first), so that the send never waits.
	// The channel carries no pointers, which makes it one allocation
	// rather than two.
	final  chan struct{} // buffered 1
	result callResult    // written before final is signalled
	// routed: a frame went to frames; guarded by reqConn.mu.
	routed bool
	// progressMu keeps progress callbacks one at a time, even for a frame
	// another call verified because its hint named the wrong call.
	progressMu sync.Mutex
}

// finish hands the call its outcome decided elsewhere; it is called once
// at most per call.
func (pc *pendingCall) finish(r callResult) {
	pc.result = r
	pc.final <- struct{}{}
}

// report passes an in-progress response to the call's callback.
func (pc *pendingCall) report(resp *protocol.Response) {
	if pc.progress == nil {
		return
	}
	pc.progressMu.Lock()
	defer pc.progressMu.Unlock()
	pc.progress(resp)
}

// routedFrames is how many routed frames may wait for a call's goroutine
// (in-progress responses queue here) before the reader waits for it.
const routedFrames = 4

type callResult struct {
	resp *protocol.Response
	err  error
	// signed is the final response's envelope in the embedded JSON form,
	// made only when the call asked for it (pendingCall.signed).
	signed json.RawMessage
	// remote: the provider answered (resp, or err from its error
	// envelope); false when the stream failed first.
	remote bool
}

// callStage is how far a failed call got: whether the request can have
// reached the provider's handler decides if another provider may be
// tried (anycall.go).
type callStage int

const (
	// stageNotSent: the request never reached the provider whole (no
	// stream, or its write failed), so no handler can have seen it.
	stageNotSent callStage = iota
	// stageSent: the request was written and the stream failed, or the
	// deadline passed, before an answer came: it may be running.
	stageSent
	// stageAnswered: the provider answered; an error is its refusal or
	// its handler's failure, told apart by the code.
	stageAnswered
)

func (c *reqConn) roundTrip(ctx context.Context, corrID string, frame []byte, progress func(*protocol.Response), signed func(json.RawMessage)) (*protocol.Response, callStage, error) {
	pc := &pendingCall{progress: progress, signed: signed,
		frames: make(chan []byte, routedFrames), gone: make(chan struct{}), final: make(chan struct{}, 1)}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, stageNotSent, err
	}
	c.pending[corrID] = pc
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.pending[corrID] == pc {
			delete(c.pending, corrID)
		}
		c.mu.Unlock()
		close(pc.gone)
	}()
	if err := c.write(frame); err != nil {
		// A failed write leaves at most part of the frame with the
		// provider, which cannot read it as a request.
		c.close(err)
		return nil, stageNotSent, protocol.Errorf(protocol.CodeUnknownAgent, "send to agent %s: %v", c.peer, err)
	}
	for {
		select {
		case f := <-pc.frames:
			if r, ok := c.accept(f, corrID, pc); ok {
				return c.result(r, pc)
			}
		case <-pc.final:
			r := pc.result
			// A frame routed here before the stream failed is the better
			// answer: take it first.
			for len(pc.frames) > 0 {
				if r2, ok := c.accept(<-pc.frames, corrID, pc); ok {
					return c.result(r2, pc)
				}
			}
			return c.result(r, pc)
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, stageSent, protocol.Errorf(protocol.CodeTimeout, "agent %s did not answer in time", c.peer)
			}
			return nil, stageSent, ctx.Err()
		case <-c.cl.done:
			return nil, stageSent, ErrClosed
		}
	}
}

// result turns a call's outcome into roundTrip's answer.
func (c *reqConn) result(r callResult, pc *pendingCall) (*protocol.Response, callStage, error) {
	if !r.remote {
		return r.resp, stageSent, r.err
	}
	if r.signed != nil {
		// Here rather than where the frame was verified, so that the
		// callback runs before Call returns and never after a timeout.
		pc.signed(r.signed)
	}
	return r.resp, stageAnswered, r.err
}

// accept verifies, then decodes, a frame routed to the call corrID on the
// call's own goroutine. ok is false while the call waits on: the frame was
// an in-progress response (given to its callback here), was rejected, or
// belonged to another call after all (handed to it).
func (c *reqConn) accept(frame []byte, corrID string, pc *pendingCall) (callResult, bool) {
	e, err := c.cl.open(frame, c.peer)
	if err != nil {
		c.cl.log.Warn("response rejected", "remote_peer", c.peer, "err", err)
		return callResult{}, false
	}
	resp, rerr := protocol.DecodeResponse(e)
	if resp == nil {
		c.cl.log.Warn("response rejected", "remote_peer", c.peer, "err", rerr)
		return callResult{}, false
	}
	if resp.CorrelationID != corrID {
		// The hint named this call but the verified envelope another (or
		// none): deliver it by its verified id, as the reader would.
		c.dispatch(resp, rerr, frame)
		return callResult{}, false
	}
	switch {
	case rerr != nil:
		return callResult{err: rerr, remote: true}, true
	case resp.Status == protocol.StatusInProgress:
		pc.report(resp)
		return callResult{}, false
	default:
		return finalResult(resp, frame, pc), true
	}
}

// finalResult is a verified final response for pc, with its receipt when
// the call keeps one.
func finalResult(resp *protocol.Response, frame []byte, pc *pendingCall) callResult {
	r := callResult{resp: resp, remote: true}
	if pc.signed != nil {
		// The receipt: the verified bytes, re-joined with their
		// signature, only for a caller that keeps it.
		if sj, err := signedJSON(frame); err == nil {
			r.signed = sj
		}
	}
	return r
}

// write writes one frame. A write that makes no progress for between
// half of and the whole I/O timeout fails, and the stream with it.
func (c *reqConn) write(frame []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wdl.extend(c.s, c.cl.ioTimeout)
	_, err := c.s.Write(frame)
	return err
}

// close fails every pending call with err and forgets the stream; the next
// call opens a new one.
func (c *reqConn) close(err error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	if pe := (*protocol.Error)(nil); !errors.As(err, &pe) && !errors.Is(err, ErrClosed) {
		err = protocol.Errorf(protocol.CodeUnknownAgent, "connection to agent %s lost: %v", c.peer, err)
	}
	c.err = err
	pending := c.pending
	c.pending = map[string]*pendingCall{}
	c.mu.Unlock()
	for _, pc := range pending {
		pc.finish(callResult{err: err})
	}
	_ = c.s.Reset()
	c.cl.forget(c)
}

// readLoop reads response frames and routes each, unverified, to the
// pending call its correlation id hint names; that call verifies it. A
// frame not routed (a lone call's answer, a stream-level error, a late
// answer) is verified here.
func (c *reqConn) readLoop() {
	fr := protocol.NewFrameReader(c.s, c.cl.maxFrame)
	for {
		frame, err := fr.Next()
		if err != nil {
			c.close(err)
			return
		}
		if pc := c.route(frame); pc != nil {
			// The reader reuses its buffer for the next frame.
			select {
			case pc.frames <- bytes.Clone(frame):
			case <-pc.gone:
			}
			continue
		}
		// Verified and decoded here, before the reader reuses its buffer:
		// nothing decoded shares the frame's bytes (protocol.Open), and a
		// receipt is built from them before dispatch returns.
		e, err := c.cl.open(frame, c.peer)
		if err != nil {
			c.cl.log.Warn("response rejected", "remote_peer", c.peer, "err", err)
			continue
		}
		resp, rerr := protocol.DecodeResponse(e)
		if resp == nil {
			c.cl.log.Warn("response rejected", "remote_peer", c.peer, "err", rerr)
			continue
		}
		if resp.CorrelationID == "" && rerr != nil {
			// A stream-level error (for example an oversize frame): the
			// provider will reset the stream, so fail everything now.
			c.close(rerr)
			return
		}
		c.dispatch(resp, rerr, frame)
	}
}

// route returns the pending call a frame's correlation id hint names, or
// nil, when other calls are pending too. The hint only picks the
// goroutine that verifies the frame; the call trusts nothing of it before
// verification.
func (c *reqConn) route(frame []byte) *pendingCall {
	id, plain := correlationHintRaw(frame)
	if !plain {
		// Escaped or missing: the rare case, unescaped as the hint is.
		hint := correlationHint(frame)
		if hint == "" {
			return nil
		}
		id = []byte(hint)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	pc := c.pending[string(id)] // which does not allocate
	if pc == nil || len(c.pending) == 1 && !pc.routed {
		// Nothing to verify in parallel with: the reader, already
		// running, verifies (handing the frame over first measured
		// ~20% slower for a lone call's latency).
		return nil
	}
	// Once one of its frames went to the call, all the rest do, so that
	// its progress callbacks run one at a time and in order.
	pc.routed = true
	return pc
}

// dispatch hands a verified response to its pending call by its verified
// correlation id: progress to the callback on the calling goroutine, a
// final answer to the call's final channel.
func (c *reqConn) dispatch(resp *protocol.Response, rerr error, frame []byte) {
	c.mu.Lock()
	pc := c.pending[resp.CorrelationID]
	if pc != nil && (rerr != nil || resp.Status.Final()) {
		delete(c.pending, resp.CorrelationID)
	}
	c.mu.Unlock()
	if pc == nil {
		return // late answer to a call that timed out
	}
	switch {
	case rerr != nil:
		pc.finish(callResult{err: rerr, remote: true})
	case resp.Status == protocol.StatusInProgress:
		pc.report(resp)
	default:
		pc.finish(finalResult(resp, frame, pc))
	}
}
