package node

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Call sends a signed request to an agent and waits for its final
// response. In-progress responses are passed to req.Progress as they
// arrive. A remote or local failure is returned as a *protocol.Error whose
// Code says what went wrong; a call that outlives its timeout returns
// TIMEOUT and never hangs.
func (n *Node) Call(ctx context.Context, req protocol.CallRequest) (resp *protocol.Response, err error) {
	start := time.Now()
	defer func() {
		n.observeSent(req.Action, strings.TrimSpace(req.To), err, start)
		n.auditCall(protocol.CallSent, n.idStr, strings.TrimSpace(req.To), req.Action, req.Params, err, start)
	}()
	to, err := sign.ParseAgentID(req.To)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "target agent: %v", err)
	}
	out, err := n.newOutgoing(req)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, out.timeout)
	defer cancel()
	if to == n.id {
		return n.callSelf(ctx, requester{agent: n.id, client: req.OnBehalfOf}, out.own(), req.Progress, req.Signed)
	}
	// Address the envelope with the canonical peer ID string; skip
	// re-encoding when the caller already gave that form.
	toStr := strings.TrimSpace(req.To)
	if !strings.HasPrefix(toStr, "12D3KooW") {
		toStr = to.String()
	}
	resp, _, err = n.callPeer(ctx, ctx, to, toStr, out)
	return resp, err
}

// outgoing is a request checked and ready to be sealed for a provider.
type outgoing struct {
	req     protocol.CallRequest
	payload *protocol.Request // &request
	meta    json.RawMessage
	timeout time.Duration

	// request is the payload's memory, so that the outgoing request and
	// its payload are one allocation.
	request protocol.Request
	// shared: the payload's params are the caller's bytes (CallRequest's
	// Params, canonical already), not a copy: sealed into a frame, they
	// need none.
	shared bool
}

// own returns the payload with params of its own, for a handler of this
// node, which may keep them after the call returns.
func (o *outgoing) own() *protocol.Request {
	if o.shared {
		o.request.Params = bytes.Clone(o.request.Params)
		o.shared = false
	}
	return o.payload
}

// newOutgoing checks req (all but its target) and builds its payload,
// with a fresh correlation id unless req names one.
func (n *Node) newOutgoing(req protocol.CallRequest) (*outgoing, error) {
	if req.Action == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "a capability (action) is required")
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = n.cfg.RequestTimeout
	}
	params, shared, err := paramsOf(req.Params)
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
	out := &outgoing{
		req:  req,
		meta: meta,
		request: protocol.Request{
			Action:        req.Action,
			CorrelationID: corrID,
			Params:        params,
			Timeout:       timeout.Milliseconds(),
		},
		timeout: timeout,
		shared:  shared,
	}
	out.payload = &out.request
	return out, nil
}

// callPeer sends out to the remote agent to and waits for its final
// answer. openCtx bounds opening the request stream, ctx the whole call.
// The stage says how far a failed call got.
func (n *Node) callPeer(ctx, openCtx context.Context, to peer.ID, toStr string, out *outgoing) (*protocol.Response, callStage, error) {
	// The params are paramsOf's, canonical: sealing need not scan
	// them again.
	frame, buf, err := n.sealPooledFrame(protocol.TypeRequest, toStr, out.payload, out.meta)
	defer putFrame(buf, frame) // roundTrip writes the frame and keeps none of it
	if err != nil {
		return nil, stageNotSent, err
	}
	if len(frame) > n.cfg.Limits.MaxFrameSize {
		return nil, stageNotSent, protocol.Errorf(protocol.CodeInvalidMessage, "request of %d bytes exceeds the %d-byte frame limit", len(frame), n.cfg.Limits.MaxFrameSize)
	}
	n.guard.hold(to) // a peer with a call in flight is not trimmed
	defer n.guard.release(to)
	c, err := n.caller.conn(openCtx, to)
	if err != nil {
		return nil, stageNotSent, err
	}
	if n.services.runsAsTask(out.req.Action) {
		n.sent.remember(out.payload.CorrelationID, to)
	}
	return c.roundTrip(ctx, out.payload.CorrelationID, frame, out.req.Progress, out.req.Signed)
}

// canonicalParams returns a call's params in canonical form, a copy of
// p's bytes.
func canonicalParams(p json.RawMessage) (json.RawMessage, error) {
	out, shared, err := paramsOf(p)
	if shared {
		out = bytes.Clone(out)
	}
	return out, err
}

// paramsOf returns a call's params in canonical form: p itself (shared)
// when it is canonical already, else a canonical copy (canonicalJSON).
func paramsOf(p json.RawMessage) (_ json.RawMessage, shared bool, _ error) {
	if len(p) == 0 || string(p) == "null" {
		return nil, false, nil
	}
	out, shared, err := canonicalJSON(p)
	if err != nil {
		return nil, false, protocol.Errorf(protocol.CodeInvalidMessage, "params are not valid JSON: %v", err)
	}
	if out[0] != '{' {
		return nil, false, protocol.Errorf(protocol.CodeInvalidMessage, "params must be a JSON object")
	}
	return out, shared, nil
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
	res, err := n.execute(ctx, nil, from, req, pf)
	if err != nil {
		return nil, err
	}
	resp := &protocol.Response{CorrelationID: req.CorrelationID, Status: protocol.StatusSuccess, Result: res}
	if signed != nil {
		// Sign the answer as a remote provider would, so that a caller
		// keeping signed answers gets one from itself too.
		sj, err := n.sealJSON(protocol.TypeResponse, n.idStr, resp)
		if err != nil {
			return nil, err
		}
		signed(sj)
	}
	return resp, nil
}

// signedJSON turns a signed frame body (signature ‖ canonical envelope)
// into the envelope's embedded JSON form.
func signedJSON(frame []byte) (json.RawMessage, error) {
	sig, body, err := protocol.SplitSigned(frame)
	if err != nil {
		return nil, err
	}
	return protocol.SignedJSON(body, sig)
}

// canonicalJSON returns v in canonical form: v itself (shared) when it is
// canonical already, as MarshalCanonical would return it but without the
// copy, else a canonical copy.
func canonicalJSON(v json.RawMessage) (_ json.RawMessage, shared bool, _ error) {
	if sign.CheckCanonical(v) == nil {
		return v, true, nil
	}
	out, err := protocol.MarshalCanonical(v)
	return out, false, err
}
