package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// CallAny sends a signed request to one of the agents that offer
// req.Action, chosen by this node, and waits for its final response; it
// returns the response and the agent id of the provider that answered.
// req.To must be empty: Call is for a named agent. Everything else in req
// means what it means for Call, and req.Timeout bounds the whole call,
// failovers included.
//
// Candidates are the connected agents whose signed hello offers the
// capability and the providers the directory (DHT) confirmed recently,
// less those whose authorized_requester_ids exclude this agent. They are
// tried in the order chooseProviders gives (load from presence
// heartbeats, then latency, by the power of two choices), at most
// MaxAnyAttempts of them, moving on only when the request provably did
// not start at the one tried, or the capability is idempotent (see
// mayFailOver): a request is never run twice unless its provider said
// that is harmless. In-progress responses of an attempt abandoned for the
// next one have already been passed to req.Progress.
//
// This node's own service is used only when no other agent offers the
// capability. With no provider at all the error is
// CAPABILITY_NOT_SUPPORTED; otherwise it is the last provider's, and the
// agent id returned with it names that provider.
func (n *Node) CallAny(ctx context.Context, req protocol.CallRequest) (resp *protocol.Response, agent string, err error) {
	start := time.Now()
	defer func() { n.observeSent(req.Action, agent, err, start) }()
	if strings.TrimSpace(req.To) != "" {
		return nil, "", protocol.Errorf(protocol.CodeInvalidMessage, "CallAny chooses the provider: the target agent must be empty (use Call to name one)")
	}
	out, err := n.newOutgoing(req)
	if err != nil {
		return nil, "", err
	}
	if err := (&protocol.Capability{Name: req.Action}).Validate(); err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, out.timeout)
	defer cancel()
	self := requester{agent: n.id, client: req.OnBehalfOf}
	cands, err := n.anyCandidates(ctx, req.Action, self)
	if err != nil {
		return nil, "", err
	}
	if len(cands) == 0 {
		if n.services.lookup(req.Action) != nil {
			resp, err := n.callSelf(ctx, self, out.own(), req.Progress, req.Signed)
			return resp, n.idStr, err
		}
		return nil, "", protocol.Errorf(protocol.CodeCapabilityNotSupported, "no agent known to this node offers capability %s", req.Action).
			WithDetails(map[string]any{"requested": req.Action})
	}
	order := chooseProviders(cands, MaxAnyAttempts, rand.IntN)
	for i, c := range order {
		agent = c.id.String()
		// Opening a stream to a provider that is gone may hang until its
		// dial times out: leave the others half of the time.
		openCtx, cancelOpen := ctx, context.CancelFunc(func() {})
		if dl, ok := ctx.Deadline(); ok && i < len(order)-1 {
			openCtx, cancelOpen = context.WithTimeout(ctx, time.Until(dl)/2)
		}
		done := n.anyState.begin(c.id)
		var stage callStage
		resp, stage, err = n.callPeer(ctx, openCtx, c.id, agent, out)
		cancelOpen()
		// Unreachable: it could not be dialled or opened.
		done(err == nil || stage != stageNotSent || !mayFailOver(stage, err, false))
		if err == nil {
			return resp, agent, nil
		}
		if ctx.Err() != nil || !mayFailOver(stage, err, c.cap.Idempotent) {
			if stage == stageSent && !c.cap.Idempotent {
				err = notSentElsewhere(err, out.payload.CorrelationID, req.Action)
			}
			return nil, agent, err
		}
		n.log.Debug("call to any provider: trying another", "capability", req.Action, "remote_peer", c.id,
			"correlation_id", out.payload.CorrelationID, "attempt", i+1, "err", err)
	}
	pe := *protocol.AsError(err)
	pe.Message = fmt.Sprintf("%s (%d providers tried)", pe.Message, len(order))
	return nil, agent, &pe
}

// notSentElsewhere adds to a protocol error of a request lost in flight
// why it was not sent to another provider: the caller must find out
// whether it ran before sending it again.
func notSentElsewhere(err error, corrID, capability string) error {
	var e *protocol.Error
	if !errors.As(err, &e) {
		return err
	}
	pe := *e
	pe.Message += fmt.Sprintf("; request %s may have run there, and was not sent to another provider because %s is not idempotent", corrID, capability)
	return &pe
}
