package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// apiSource is the source under which the node offers the capabilities
// its local API's clients serve, beside its own (capabilities file) and a
// relay's lobby agents'.
const apiSource = "local-api"

// nodeProvider lets the local API's clients serve capabilities and
// exchange direct messages through the node: the rpc package speaks in
// its own types and never imports the node, so this adapts one to the
// other.
type nodeProvider struct{ n *node.Node }

var _ rpc.Provider = nodeProvider{}

// Offer offers caps as the local API's source; each request runs through
// the node's checks, then h.
func (p nodeProvider) Offer(caps []protocol.Capability, h rpc.TaskHandler) error {
	ss := make([]node.Service, len(caps))
	for i, c := range caps {
		ss[i] = node.Service{Capability: c, Handler: node.HandlerFunc(func(ctx context.Context, call *node.Call) (json.RawMessage, error) {
			t := &rpc.Task{
				Requester:     call.Requester(),
				Capability:    call.Request.Action,
				Params:        call.Request.Params,
				CorrelationID: call.Request.CorrelationID,
				Progress:      call.Progress,
				SetState:      func(s protocol.TaskState) { call.SetState(s, "") },
				ID:            call.TaskID(),
				Escalate:      call.Escalate,
				Decision:      call.Decision,
			}
			if d, ok := ctx.Deadline(); ok {
				t.Deadline = d
			}
			res, err := h(ctx, t)
			if errors.Is(err, rpc.ErrEscalated) {
				return nil, node.ErrEscalated
			}
			return res, err
		})}
	}
	return p.n.Offer(apiSource, ss)
}

// OnMessage sets the node's direct-message handler. When the last client
// taking messages has gone (past its grace), messages are held rather
// than handed back to the node's default, which would accept and log
// them: the sender's node keeps each one and retries until the agent is
// back (or the TTL passes).
func (p nodeProvider) OnMessage(h rpc.MessageHandler) {
	if h == nil {
		p.n.OnMessage(holdMessages)
		return
	}
	p.n.OnMessage(func(ctx context.Context, from peer.ID, m protocol.AgentMessage) (json.RawMessage, error) {
		return h(ctx, from.String(), m)
	})
}

// SendMessage sends through the node's at-least-once delivery, each
// attempt bounded by the node's request timeout; a message queued for an
// agent that is away is rpc.ErrQueued, and one the outbox could not write
// (store.ErrWrite: a full disk) is rpc.ErrNotAccepted.
func (p nodeProvider) SendMessage(ctx context.Context, to string, m protocol.AgentMessage) (json.RawMessage, error) {
	res, err := p.n.SendMessage(ctx, to, m, 0)
	switch {
	case errors.Is(err, node.ErrQueued):
		return nil, fmt.Errorf("%w: %w", rpc.ErrQueued, err)
	case errors.Is(err, store.ErrWrite):
		return nil, notAccepted(err)
	}
	return res, err
}

// notAccepted is rpc.ErrNotAccepted for err, a failed send whose store
// write failed, on one line (a dial error spans lines): the write's error,
// then why the message had to be kept (node.NotKeptError).
func notAccepted(err error) error {
	msg := err.Error()
	if nk, ok := errors.AsType[*node.NotKeptError](err); ok {
		msg = nk.Err.Error() + " (not delivered: " + nk.Cause.Error() + ")"
	}
	return fmt.Errorf("%w: %s", rpc.ErrNotAccepted, strings.Join(strings.Fields(msg), " "))
}

// holdMessages refuses a direct message as CAPABILITY_NOT_SUPPORTED, the
// refusal a sender's node queues and retries within the message TTL (see
// node's store and forward): the agent taking messages on this node is
// away, not gone.
func holdMessages(context.Context, peer.ID, protocol.AgentMessage) (json.RawMessage, error) {
	return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "the agent taking messages on this node is not attached yet; the sender's node keeps the message and retries")
}
