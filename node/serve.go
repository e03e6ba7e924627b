package node

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
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
	slots  chan struct{} // per-stream in-flight bound
	wg     sync.WaitGroup
	broken bool // set once a write fails; guarded by wmu
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
	n.mu.Lock()
	n.inbound[s] = struct{}{}
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		delete(n.inbound, s)
		n.mu.Unlock()
	}()

	remote := s.Conn().RemotePeer()
	ss := &serverStream{n: n, s: s, remote: remote, remStr: remote.String(), slots: make(chan struct{}, n.cfg.Limits.MaxPerStream)}
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
		go func() {
			release := n.guard.hold(ss.remote) // a peer with work in flight is not trimmed
			defer func() {
				release()
				<-n.sem
				<-ss.slots
				ss.wg.Done()
			}()
			ss.serve(buf)
		}()
	}
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
	timeout := n.cfg.Limits.HandlerTimeout
	// Compared in milliseconds: a huge timeout must not overflow a Duration.
	if req.Timeout > 0 && req.Timeout < timeout.Milliseconds() {
		timeout = time.Duration(req.Timeout) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(n.ctx, timeout)
	defer cancel()
	sendProgress := func(res json.RawMessage) error {
		return ss.send(protocol.TypeResponse, &protocol.Response{CorrelationID: req.CorrelationID, Status: protocol.StatusInProgress, Result: res})
	}
	if builtin(req.Action) {
		start := time.Now()
		res, err := n.execute(ctx, from, req, func(r json.RawMessage) error {
			res, err := protocol.MarshalCanonical(r)
			if err != nil {
				return protocol.Errorf(protocol.CodeInternalError, "progress result is not JSON: %v", err)
			}
			return sendProgress(res)
		})
		n.observeServed(req.Action, err, start)
		ss.reply(req.CorrelationID, res, err)
		return
	}
	ctx, t, run, err := n.admitTask(ctx, from, req)
	if err != nil {
		ss.reply(req.CorrelationID, nil, err)
		return
	}
	// This stream receives the task's progress from now on, whichever
	// request of it runs the handler.
	defer t.attach(ss, sendProgress)()
	if !run {
		// The requester sent this request before (a retry after a lost
		// answer): it runs once, and this request gets its answer.
		n.log.Debug("repeated request answered from its task", "remote_peer", ss.remote, "requester", from, "correlation_id", req.CorrelationID)
		select {
		case <-t.done:
			res, err := t.answer()
			ss.reply(req.CorrelationID, res, err)
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				ss.reply(req.CorrelationID, nil, protocol.Errorf(protocol.CodeTimeout,
					"request %s is still running here (it runs once); send it again with the same id for its answer, or ask for its task status", req.CorrelationID))
			} else {
				ss.reply(req.CorrelationID, nil, ErrClosed)
			}
		}
		return
	}
	progress := func(r json.RawMessage) error {
		res, err := protocol.MarshalCanonical(r)
		if err != nil {
			return protocol.Errorf(protocol.CodeInternalError, "progress result is not JSON: %v", err)
		}
		return t.progress(res)
	}
	start := time.Now()
	res, err := n.execute(ctx, from, req, progress)
	n.finishTask(t, res, err)
	res, err = t.answer()
	n.observeServed(req.Action, err, start)
	ss.reply(req.CorrelationID, res, err)
}

// builtin reports whether an action is one of the node's own capabilities
// rather than a service's.
func builtin(action string) bool {
	switch action {
	case protocol.MessageCapability, protocol.TaskStatusCapability, protocol.TaskCancelCapability:
		return true
	}
	return false
}

// reply writes the final answer: a success response, or an error envelope.
func (ss *serverStream) reply(corrID string, result json.RawMessage, err error) {
	if err != nil {
		pe := *protocol.AsError(err)
		pe.CorrelationID = corrID
		_ = ss.send(protocol.TypeError, &pe)
		return
	}
	_ = ss.send(protocol.TypeResponse, &protocol.Response{CorrelationID: corrID, Status: protocol.StatusSuccess, Result: result})
}

func (ss *serverStream) send(typ protocol.MessageType, payload any) error {
	frame, err := ss.n.sealFrame(typ, ss.remStr, payload)
	if err != nil {
		ss.n.log.Error("seal response", "remote_peer", ss.remote, "err", err)
		return err
	}
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	if ss.broken {
		return io.ErrClosedPipe
	}
	_ = ss.s.SetWriteDeadline(time.Now().Add(ss.n.cfg.Limits.IOTimeout))
	if _, err := ss.s.Write(frame); err != nil {
		// A requester that stops reading is cut off, not waited for.
		ss.broken = true
		_ = ss.s.Reset()
		return err
	}
	return nil
}

// execute applies the provider-side checks of a request, in DESIGN.md's
// order, and runs the handler: the capability exists, the requester is
// authorised, the params match input_schema; then the result must match
// output_schema.
func (n *Node) execute(ctx context.Context, from requester, req *protocol.Request, progress func(json.RawMessage) error) (json.RawMessage, error) {
	if req.Action == protocol.TaskStatusCapability || req.Action == protocol.TaskCancelCapability {
		return n.taskRequest(from, req)
	}
	if req.Action == protocol.MessageCapability {
		if r := n.policy.Load().ruleFor(from); !r.allows(req.Action) {
			n.refused(metrics.RefusedPolicy)
			return nil, protocol.Errorf(protocol.CodeUnauthorized, "policy %s does not allow agent %s to send messages", r.name, from)
		}
		return n.receiveMessage(ctx, from.agent, req)
	}
	n.mu.RLock()
	svc := n.services[req.Action]
	n.mu.RUnlock()
	if svc == nil {
		available := n.capabilityNames()
		return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "agent does not support %s capability", req.Action).
			WithDetails(map[string]any{"requested": req.Action, "available": available})
	}
	if !svc.acl.admits(from) {
		n.refused(metrics.RefusedACL)
		return nil, protocol.Errorf(protocol.CodeUnauthorized, "agent %s is not authorized to call capability %s", from, req.Action)
	}
	if r := n.policy.Load().ruleFor(from); !r.allows(req.Action) {
		n.refused(metrics.RefusedPolicy)
		return nil, protocol.Errorf(protocol.CodeUnauthorized, "policy %s does not allow agent %s to call capability %s (allowed_capabilities: %s)",
			r.name, from, req.Action, strings.Join(r.allowed, ", "))
	}
	if err := svc.in.Validate("params", req.Params); err != nil {
		n.refused(metrics.RefusedSchema)
		return nil, err
	}
	if progress == nil {
		progress = func(json.RawMessage) error { return nil }
	}
	t := taskOf(ctx)
	if t != nil {
		t.set(n, protocol.TaskApproved, "")
	}
	res, err := svc.Handler.Handle(ctx, &Call{From: from.agent, OnBehalfOf: from.client, Request: req, Progress: progress, node: n, task: t})
	if err != nil {
		if ctx.Err() != nil && protocol.CodeOf(err) == protocol.CodeInternalError {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, protocol.Errorf(protocol.CodeTimeout, "capability %s did not finish in time", req.Action)
			}
		}
		return nil, err
	}
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, protocol.Errorf(protocol.CodeTimeout, "capability %s did not finish in time", req.Action)
	}
	if len(res) == 0 {
		res = json.RawMessage("null")
	}
	canon, err := protocol.MarshalCanonical(res)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "capability %s returned invalid JSON: %v", req.Action, err)
	}
	if err := svc.out.Validate("result", canon); err != nil {
		pe := protocol.AsError(err)
		return nil, protocol.Errorf(protocol.CodeInternalError, "capability %s returned a result that does not match its output_schema: %s", req.Action, pe.Message).
			WithDetails(json.RawMessage(pe.Details))
	}
	return canon, nil
}
