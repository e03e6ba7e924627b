package node

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/metrics"
	"github.com/meshagent/meshagent/protocol"
)

// serverStream is one inbound request stream from a requester.
type serverStream struct {
	n      *Node
	s      network.Stream
	remote peer.ID
	remStr string // remote.String(), computed once per stream
	wmu    sync.Mutex
	wdl    writeDeadline // guarded by wmu
	slots  chan struct{} // per-stream in-flight bound
	wg     sync.WaitGroup
	broken bool // set once a write fails; guarded by wmu

	// idle hands a frame to the stream's spare worker, a goroutine that
	// served a request and waits for the next rather than exiting, so that
	// a stream of requests does not pay for a new goroutine and the growth
	// of its stack (verification needs ~16 KiB) on every request. The
	// channel is unbuffered: a frame goes to the spare only if it waits.
	// spare is set while a worker is the spare or about to be; there is
	// at most one per stream, and maxSpareWorkers in all. workers counts
	// the goroutines, so that the stream's handler returns only once they
	// have.
	idle    chan []byte
	spare   atomic.Bool
	workers sync.WaitGroup
}

// inboundStreams is the request streams being served, under its own lock,
// so that Close can reset them: a stream read has no deadline.
type inboundStreams struct {
	mu     sync.Mutex
	closed bool
	m      map[network.Stream]struct{}

	// spares counts the streams' spare workers, at most maxSpareWorkers,
	// so that thousands of requesters do not each keep a goroutine and
	// its stack waiting.
	spares atomic.Int32
}

// maxSpareWorkers bounds the spare workers of all a node's request
// streams together.
const maxSpareWorkers = 64

// add records s, or refuses it once the node is closing.
func (is *inboundStreams) add(s network.Stream) bool {
	is.mu.Lock()
	defer is.mu.Unlock()
	if is.closed {
		return false
	}
	if is.m == nil {
		is.m = map[network.Stream]struct{}{}
	}
	is.m[s] = struct{}{}
	return true
}

func (is *inboundStreams) remove(s network.Stream) {
	is.mu.Lock()
	delete(is.m, s)
	is.mu.Unlock()
}

// close refuses further streams and resets those being served.
func (is *inboundStreams) close() {
	is.mu.Lock()
	is.closed = true
	streams := make([]network.Stream, 0, len(is.m))
	for s := range is.m {
		streams = append(streams, s)
	}
	is.mu.Unlock()
	for _, s := range streams {
		_ = s.Reset()
	}
}

// handleRequestStream reads request frames and runs each on its own
// goroutine. Limits checked here, before any signature is verified: the
// frame size, the requester's size limit and its rate limit.
func (n *Node) handleRequestStream(s network.Stream) {
	if !n.track() {
		_ = s.Reset()
		return
	}
	defer n.wg.Done()
	if !n.inbound.add(s) {
		_ = s.Reset()
		return
	}
	defer n.inbound.remove(s)

	remote := s.Conn().RemotePeer()
	ss := &serverStream{n: n, s: s, remote: remote, remStr: remote.String(), slots: make(chan struct{}, n.cfg.Limits.MaxPerStream),
		idle: make(chan []byte)}
	defer func() {
		close(ss.idle) // the spare, if any, exits
		ss.workers.Wait()
	}()
	lim := n.cfg.Limits
	fr := protocol.NewFrameReader(s, lim.MaxFrameSize)
	for {
		frame, err := fr.Next()
		if err != nil {
			if errors.Is(err, protocol.ErrFrameTooLarge) {
				n.log.Warn("request rejected", "remote_peer", ss.remote, "err", err)
				ss.reply("", nil, protocol.Errorf(protocol.CodeInvalidMessage, "%v", err))
				ss.wg.Wait()
				// The stream is out of sync: stop reading, but let the error
				// reach the requester before the stream goes away.
				_ = s.CloseRead()
				_ = s.Close()
				return
			}
			if !errors.Is(err, io.EOF) {
				n.log.Debug("request stream ended", "remote_peer", ss.remote, "err", err)
			}
			ss.wg.Wait()
			_ = s.Close()
			return
		}
		if len(frame) > lim.MaxRequestBytes {
			n.refused(metrics.RefusedRateLimit)
			ss.reply(correlationHint(frame), nil, protocol.Errorf(protocol.CodeRateLimited,
				"request of %d bytes exceeds this agent's limit of %d bytes per request", len(frame), lim.MaxRequestBytes))
			continue
		}
		if !n.limiter.allow(ss.remote) {
			n.refused(metrics.RefusedRateLimit)
			ss.reply(correlationHint(frame), nil, protocol.Errorf(protocol.CodeRateLimited,
				"more than %g requests per second (burst %d) from %s", lim.RequestsPerSecond, lim.Burst, ss.remote))
			continue
		}
		if err := n.policy.Load().rule(ss.remote).admitFrame(ss.remote, len(frame)); err != nil {
			n.refused(metrics.RefusedPolicy)
			ss.reply(correlationHint(frame), nil, err)
			continue
		}
		// Back-pressure: wait for a slot rather than reading more.
		select {
		case ss.slots <- struct{}{}:
		case <-n.ctx.Done():
			ss.wg.Wait()
			_ = s.Reset()
			return
		}
		select {
		case n.sem <- struct{}{}:
		case <-n.ctx.Done():
			<-ss.slots
			ss.wg.Wait()
			_ = s.Reset()
			return
		}
		buf := append([]byte(nil), frame...)
		ss.wg.Add(1)
		select {
		case ss.idle <- buf:
		default:
			ss.workers.Add(1)
			go ss.work(buf)
		}
	}
}

// work serves buf, then stays as the stream's spare worker for the frames
// that follow while no other goroutine is the spare and the node has room
// for one more.
func (ss *serverStream) work(buf []byte) {
	defer ss.workers.Done()
	spares := &ss.n.inbound.spares
	for {
		ss.serveHeld(buf)
		if !ss.spare.CompareAndSwap(false, true) {
			return
		}
		if spares.Add(1) > maxSpareWorkers {
			spares.Add(-1)
			ss.spare.Store(false)
			return
		}
		var ok bool
		buf, ok = <-ss.idle
		spares.Add(-1)
		if !ok {
			return
		}
		ss.spare.Store(false)
	}
}

// serveHeld serves one frame that holds a slot of the stream and of the
// node, and releases them.
func (ss *serverStream) serveHeld(buf []byte) {
	n := ss.n
	n.guard.hold(ss.remote) // a peer with work in flight is not trimmed
	defer func() {
		n.guard.release(ss.remote)
		<-n.sem
		<-ss.slots
		ss.wg.Done()
	}()
	ss.serve(buf)
}

// serve verifies one request frame, runs it and writes the answer.
func (ss *serverStream) serve(frame []byte) {
	n := ss.n
	e, err := n.openFrame(frame, ss.remote)
	if err != nil {
		n.log.Warn("request rejected", "remote_peer", ss.remote, "err", err)
		ss.reply(correlationHint(frame), nil, err)
		return
	}
	if e.Type != protocol.TypeRequest {
		n.refused(metrics.RefusedInvalid)
		ss.reply(correlationHint(frame), nil, protocol.Errorf(protocol.CodeInvalidMessage, "expected a request, got %s", e.Type))
		return
	}
	req, err := protocol.DecodeRequest(e)
	if err != nil {
		corrID := correlationHint(frame)
		if req != nil && req.CorrelationID != "" {
			corrID = req.CorrelationID
		}
		n.log.Debug("request rejected", "remote_peer", ss.remote, "err", err)
		n.refused(metrics.RefusedInvalid)
		ss.reply(corrID, nil, err)
		return
	}
	from, err := n.requesterOf(e, ss.remote, len(frame))
	if err != nil {
		ss.reply(req.CorrelationID, nil, err)
		return
	}
	if req.Detach > 0 {
		ss.serveDetached(from, req)
		return
	}
	timeout := n.cfg.Limits.HandlerTimeout
	// Compared in milliseconds: a huge timeout must not overflow a Duration.
	if req.Timeout > 0 && req.Timeout < timeout.Milliseconds() {
		timeout = time.Duration(req.Timeout) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(n.ctx, timeout)
	defer cancel()
	sendProgress := func(res json.RawMessage) error {
		// run hands on progress canonical (MarshalCanonical's).
		return ss.send(protocol.TypeResponse, &protocol.Response{CorrelationID: req.CorrelationID, Status: protocol.StatusInProgress, Result: res})
	}
	res, err := n.run(ctx, cancel, from, ss.remStr, req, ss, sendProgress, nil)
	ss.reply(req.CorrelationID, res, err)
}

// run executes a verified request as its provider and returns its final
// answer: the request of a stream (serve), or one fetched from a mailbox.
// A request that runs as a task runs once per requester and request id:
// a repeat waits for the first one's answer (see taskTable.admit).
// sendProgress takes the task's progress for receiver, a key naming
// where it goes (a stream sends each progress once, however many times
// it sent the request). agent is from.agent.String(), which a stream
// holds already, so that a request does not pay to encode it again.
// cancel cancels ctx, which the caller made for this request alone: the
// request's task, if it runs as one, is cancelled through it. d, when
// not nil, marks a request that may come again after a restart (from a
// mailbox, or detached): its task is recorded in the store (see
// taskdisk.go and detach.go).
func (n *Node) run(ctx context.Context, cancel context.CancelFunc, from requester, agent string, req *protocol.Request, receiver any, sendProgress func(json.RawMessage) error, d *durableRun) (json.RawMessage, error) {
	progress := sendProgress
	var t *task
	if n.services.runsAsTask(req.Action) {
		var (
			run bool
			err error
		)
		t, run, err = n.tasks.admit(ctx, cancel, from, from.stringWith(agent), req, d != nil)
		if err != nil {
			return nil, err
		}
		// This receiver gets the task's progress from now on, whichever
		// request of it runs the handler.
		t.attach(receiver, sendProgress)
		defer t.detach(receiver)
		if !run && d != nil && d.accepted != nil {
			// A detached request submitted again: its task's id is the
			// answer, whatever state it is in.
			d.accepted(t)
			return nil, nil
		}
		if run && d != nil {
			t.onAccepted, t.onFinal = d.accepted, d.final
			t.mu.Lock()
			t.detachAt = d.detach
			t.mu.Unlock()
		}
		if !run {
			// The requester sent this request before (a retry after a lost
			// answer): it runs once, and this request gets its answer.
			n.log.Debug("repeated request answered from its task", "requester", from, "correlation_id", req.CorrelationID)
			return awaitTask(ctx, t, req.CorrelationID)
		}
		progress = t.progress
	}
	start := time.Now()
	res, err := n.execute(ctx, t, from, req, func(r json.RawMessage) error {
		res, err := protocol.MarshalCanonical(r)
		if err != nil {
			return protocol.Errorf(protocol.CodeInternalError, "progress result is not JSON: %v", err)
		}
		return progress(res)
	})
	if t != nil && errors.Is(err, ErrEscalated) {
		var park func()
		if d != nil {
			park = d.park
		}
		res, err = n.awaitDecision(ctx, t, park)
		if errors.Is(err, errLeftEscalated) {
			return nil, ErrClosed
		}
	}
	if t != nil {
		n.tasks.finish(t, res, err)
		res, err = t.answer()
	}
	n.observeServed(req.Action, agent, err, start)
	n.auditCall(protocol.CallServed, agent, n.idStr, req.Action, req.Params, err, start)
	return res, err
}

// awaitTask returns the answer of a repeated request's task once the task
// finishes.
func awaitTask(ctx context.Context, t *task, corrID string) (json.RawMessage, error) {
	select {
	case <-t.done:
		return t.answer()
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, protocol.Errorf(protocol.CodeTimeout,
				"request %s is still running here (it runs once); send it again with the same id for its answer, or ask for its task status", corrID)
		}
		return nil, ErrClosed
	}
}

// reply writes the final answer: a success response, or an error
// envelope. result is canonical, as run returns it.
func (ss *serverStream) reply(corrID string, result json.RawMessage, err error) {
	if err != nil {
		pe := *protocol.AsError(err)
		pe.CorrelationID = corrID
		_ = ss.send(protocol.TypeError, &pe)
		return
	}
	// A result is run's, canonical (execute made it with MarshalCanonical).
	_ = ss.send(protocol.TypeResponse, &protocol.Response{CorrelationID: corrID, Status: protocol.StatusSuccess, Result: result})
}

// writeDeadline is the write deadline last set on a stream. Setting one
// costs the muxer a timer, so that a stream written to for every request
// extends its deadline only once half of the timeout has gone, as yamux
// does for its connection: a write that makes no progress fails after
// between half of and the whole timeout. Its user serialises the calls.
type writeDeadline struct {
	at time.Time
}

// extend makes sure s's write deadline is at least timeout/2 away.
func (d *writeDeadline) extend(s network.Stream, timeout time.Duration) {
	now := time.Now()
	if now.Add(timeout / 2).Before(d.at) {
		return
	}
	d.at = now.Add(timeout)
	_ = s.SetWriteDeadline(d.at)
}

// send seals payload and writes it; a write that makes no progress for
// between half of and the whole I/O timeout cuts the requester off.
func (ss *serverStream) send(typ protocol.MessageType, payload any) error {
	frame, buf, err := ss.n.sealPooledFrame(typ, ss.remStr, payload, nil)
	defer putFrame(buf, frame)
	if err != nil {
		ss.n.log.Error("seal response", "remote_peer", ss.remote, "err", err)
		return err
	}
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if ss.broken {
		return io.ErrClosedPipe
	}
	ss.wdl.extend(ss.s, ss.n.cfg.Limits.IOTimeout)
	if _, err := ss.s.Write(frame); err != nil {
		// A requester that stops reading is cut off, not waited for.
		ss.broken = true
		_ = ss.s.Reset()
		return err
	}
	return nil
}
