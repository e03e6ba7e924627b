package node

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Call sends a signed request to an agent and waits for its final
// response. In-progress responses are passed to req.Progress as they
// arrive. A remote or local failure is returned as a *protocol.Error whose
// Code says what went wrong; a call that outlives its timeout returns
// TIMEOUT and never hangs.
func (n *Node) Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error) {
	to, err := sign.ParseAgentID(req.To)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "target agent: %v", err)
	}
	if req.Action == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "a capability (action) is required")
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = n.cfg.RequestTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	params, err := canonicalParams(req.Params)
	if err != nil {
		return nil, err
	}
	meta, err := protocol.OnBehalfOfMetadata(req.OnBehalfOf)
	if err != nil {
		return nil, err
	}
	corrID := req.CorrelationID
	if corrID == "" {
		corrID = protocol.NewID()
	}
	payload := &protocol.Request{
		Action:        req.Action,
		CorrelationID: corrID,
		Params:        params,
		Timeout:       timeout.Milliseconds(),
	}
	if to == n.id {
		return n.callSelf(ctx, requester{agent: n.id, client: req.OnBehalfOf}, payload, req.Progress, req.Signed)
	}
	// Address the envelope with the canonical peer ID string; skip
	// re-encoding when the caller already gave that form.
	toStr := strings.TrimSpace(req.To)
	if !strings.HasPrefix(toStr, "12D3KooW") {
		toStr = to.String()
	}
	frame, err := n.sealFrameMeta(protocol.TypeRequest, toStr, payload, meta)
	if err != nil {
		return nil, err
	}
	if len(frame) > n.cfg.Limits.MaxFrameSize {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "request of %d bytes exceeds the %d-byte frame limit", len(frame), n.cfg.Limits.MaxFrameSize)
	}
	defer n.guard.hold(to)() // a peer with a call in flight is not trimmed
	c, err := n.conn(ctx, to)
	if err != nil {
		return nil, err
	}
	if !builtin(req.Action) {
		n.rememberTask(corrID, to)
	}
	return c.roundTrip(ctx, payload.CorrelationID, frame, req.Progress, req.Signed)
}

func canonicalParams(p json.RawMessage) (json.RawMessage, error) {
	if len(p) == 0 || string(p) == "null" {
		return nil, nil
	}
	out, err := protocol.MarshalCanonical(p)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "params are not valid JSON: %v", err)
	}
	if out[0] != '{' {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "params must be a JSON object")
	}
	return out, nil
}

// callSelf runs a request against this node's own services, with the same
// checks a remote request gets (for a client the node vouches for, the
// policy rule naming the client too).
func (n *Node) callSelf(ctx context.Context, from requester, req *protocol.Request, progress func(*protocol.Response), signed func(json.RawMessage)) (*protocol.Response, error) {
	if err := n.policy.Load().admitClient(from, len(req.Params)); err != nil {
		return nil, err
	}
	var pf func(json.RawMessage) error
	if progress != nil {
		pf = func(r json.RawMessage) error {
			progress(&protocol.Response{CorrelationID: req.CorrelationID, Status: protocol.StatusInProgress, Result: r})
			return nil
		}
	}
	res, err := n.execute(ctx, from, req, pf)
	if err != nil {
		return nil, err
	}
	resp := &protocol.Response{CorrelationID: req.CorrelationID, Status: protocol.StatusSuccess, Result: res}
	if signed != nil {
		// Sign the answer as a remote provider would, so that a caller
		// keeping signed answers gets one from itself too.
		frame, err := n.sealFrame(protocol.TypeResponse, n.idStr, resp)
		if err != nil {
			return nil, err
		}
		// The frame starts with its uvarint length prefix; the signed
		// JSON form is made from the body after it.
		if _, k := binary.Uvarint(frame); k > 0 {
			if sj, err := signedJSON(frame[k:]); err == nil {
				signed(sj)
			}
		}
	}
	return resp, nil
}

// signedJSON turns a signed frame (signature ‖ canonical envelope) into the
// envelope's embedded JSON form.
func signedJSON(frame []byte) (json.RawMessage, error) {
	sig, body, err := protocol.SplitSigned(frame)
	if err != nil {
		return nil, err
	}
	return protocol.SignedJSON(body, sig)
}

// conn returns the request stream to p, opening it if needed. Concurrent
// callers share one opening: the first opens the stream, the rest wait for
// it, so a burst of calls to a new peer costs one stream, not one each.
func (n *Node) conn(ctx context.Context, p peer.ID) (*reqConn, error) {
	for {
		n.mu.Lock()
		if n.closed {
			n.mu.Unlock()
			return nil, ErrClosed
		}
		if c, ok := n.conns[p]; ok {
			n.mu.Unlock()
			return c, nil
		}
		wait, dialing := n.dialing[p]
		if !dialing {
			wait = make(chan struct{})
			n.dialing[p] = wait
		}
		n.mu.Unlock()
		if dialing {
			select {
			case <-wait:
				continue // the opener finished: use its stream or try ourselves
			case <-ctx.Done():
				return nil, protocol.Errorf(protocol.CodeTimeout, "timed out reaching agent %s", p)
			}
		}
		c, err := n.openConn(ctx, p)
		n.mu.Lock()
		delete(n.dialing, p)
		close(wait)
		n.mu.Unlock()
		return c, err
	}
}

// openConn opens the request stream to p and starts its reader.
func (n *Node) openConn(ctx context.Context, p peer.ID) (*reqConn, error) {
	if n.host.Network().Connectedness(p) != network.Connected && len(n.host.Peerstore().Addrs(p)) == 0 {
		return nil, protocol.Errorf(protocol.CodeUnknownAgent, "agent %s is not connected and has no known address", p)
	}
	s, err := n.host.NewStream(ctx, p, protocol.RequestProtocol)
	if err != nil {
		if ctx.Err() != nil {
			return nil, protocol.Errorf(protocol.CodeTimeout, "timed out reaching agent %s", p)
		}
		return nil, protocol.Errorf(protocol.CodeUnknownAgent, "cannot reach agent %s: %v", p, err)
	}
	c := &reqConn{n: n, peer: p, s: s, pending: make(map[string]*pendingCall), done: make(chan struct{})}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		_ = s.Reset()
		return nil, ErrClosed
	}
	n.conns[p] = c
	n.wg.Add(1)
	n.mu.Unlock()
	go func() {
		defer n.wg.Done()
		c.readLoop()
	}()
	return c, nil
}

// reqConn is the long-lived request stream to one peer, shared by every
// concurrent call to it.
type reqConn struct {
	n    *Node
	peer peer.ID
	s    network.Stream

	wmu sync.Mutex // serialises frame writes

	mu      sync.Mutex
	pending map[string]*pendingCall
	err     error
	done    chan struct{}
}

type pendingCall struct {
	progress func(*protocol.Response)
	signed   func(json.RawMessage)
	final    chan callResult // buffered 1
}

type callResult struct {
	resp *protocol.Response
	err  error
}

func (c *reqConn) roundTrip(ctx context.Context, corrID string, frame []byte, progress func(*protocol.Response), signed func(json.RawMessage)) (*protocol.Response, error) {
	pc := &pendingCall{progress: progress, signed: signed, final: make(chan callResult, 1)}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, err
	}
	c.pending[corrID] = pc
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, corrID)
		c.mu.Unlock()
	}()
	if err := c.write(frame); err != nil {
		c.close(err)
		return nil, protocol.Errorf(protocol.CodeUnknownAgent, "send to agent %s: %v", c.peer, err)
	}
	select {
	case r := <-pc.final:
		return r.resp, r.err
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, protocol.Errorf(protocol.CodeTimeout, "agent %s did not answer in time", c.peer)
		}
		return nil, ctx.Err()
	case <-c.n.ctx.Done():
		return nil, ErrClosed
	}
}

func (c *reqConn) write(frame []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.s.SetWriteDeadline(time.Now().Add(c.n.cfg.Limits.IOTimeout))
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
		pc.final <- callResult{err: err}
	}
	_ = c.s.Reset()
	c.n.mu.Lock()
	if c.n.conns[c.peer] == c {
		delete(c.n.conns, c.peer)
	}
	c.n.mu.Unlock()
}

// readLoop reads response frames and hands each to its pending call.
func (c *reqConn) readLoop() {
	fr := protocol.NewFrameReader(c.s, c.n.cfg.Limits.MaxFrameSize)
	for {
		frame, err := fr.Next()
		if err != nil {
			c.close(err)
			return
		}
		e, err := c.n.openFrame(frame, c.peer)
		if err != nil {
			c.n.log.Warn("response rejected", "remote_peer", c.peer, "err", err)
			continue
		}
		resp, rerr := protocol.DecodeResponse(e)
		if resp == nil {
			c.n.log.Warn("response rejected", "remote_peer", c.peer, "err", rerr)
			continue
		}
		if resp.CorrelationID == "" && rerr != nil {
			// A stream-level error (for example an oversize frame): the
			// provider will reset the stream, so fail everything now.
			c.close(rerr)
			return
		}
		c.mu.Lock()
		pc := c.pending[resp.CorrelationID]
		if pc != nil && (rerr != nil || resp.Status.Final()) {
			delete(c.pending, resp.CorrelationID)
		}
		c.mu.Unlock()
		if pc == nil {
			continue // late answer to a call that timed out
		}
		switch {
		case rerr != nil:
			pc.final <- callResult{err: rerr}
		case resp.Status == protocol.StatusInProgress:
			if pc.progress != nil {
				pc.progress(resp)
			}
		default:
			if pc.signed != nil && resp.Status == protocol.StatusSuccess {
				if sj, err := signedJSON(frame); err == nil {
					pc.signed(sj)
				}
			}
			pc.final <- callResult{resp: resp}
		}
	}
}
