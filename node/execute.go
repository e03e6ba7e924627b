package node

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/meshagent/meshagent/metrics"
	"github.com/meshagent/meshagent/protocol"
)

// execute applies the provider-side checks of a request, in DESIGN.md's
// order, and runs the handler: the capability exists, the requester is
// authorised, the params match input_schema; then the result must match
// output_schema. Every request takes this path, the node's own
// capabilities (builtins.go) included. t is the request's task, if it
// runs as one.
func (n *Node) execute(ctx context.Context, t *task, from requester, req *protocol.Request, progress func(json.RawMessage) error) (json.RawMessage, error) {
	svc := n.services.lookup(req.Action)
	if svc == nil {
		available := n.capabilityNames()
		return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "agent does not support %s capability", req.Action).
			WithDetails(map[string]any{"requested": req.Action, "available": available})
	}
	if err := n.admit(svc, from, req); err != nil {
		return nil, err
	}
	if err := svc.in.Validate("params", req.Params); err != nil {
		n.refused(metrics.RefusedSchema)
		return nil, err
	}
	if progress == nil {
		progress = func(json.RawMessage) error { return nil }
	}
	if t != nil && t.durable && !t.recorded {
		// Accepted: on disk before the handler runs, so that a restart
		// never runs it again.
		if err := n.tasks.record(ctx, t); err != nil {
			return nil, err
		}
	}
	if t != nil {
		t.emit(protocol.EventRequestSubmitted, "")
		t.set(protocol.TaskApproved, "")
		if t.onAccepted != nil {
			t.onAccepted(t)
		}
	}
	res, err := svc.Handler.Handle(ctx, &Call{From: from.agent, OnBehalfOf: from.client, Request: req, Progress: progress, task: t})
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
	// The result is the node's once Handle returns (Handler): a
	// canonical one is kept and sent as it is.
	canon, _, err := canonicalJSON(res)
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

// admit decides whether from may call svc: a built-in by its own rule, a
// registered service by its authorized_requester_ids and then the policy.
func (n *Node) admit(svc *service, from requester, req *protocol.Request) error {
	if svc.admit != nil {
		return svc.admit(from, req)
	}
	if !svc.acl.admits(from) {
		n.refused(metrics.RefusedACL)
		return protocol.Errorf(protocol.CodeUnauthorized, "agent %s is not authorized to call capability %s", from, req.Action)
	}
	if r := n.policy.Load().ruleFor(from); !r.allows(req.Action) {
		n.refused(metrics.RefusedPolicy)
		return protocol.Errorf(protocol.CodeUnauthorized, "policy %s does not allow agent %s to call capability %s (allowed_capabilities: %s)",
			r.name, from, req.Action, strings.Join(r.allowed, ", "))
	}
	return nil
}
