package localapi

import (
	"context"
	"encoding/json"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// beadContext serves mesh.contextGet, mesh.contextSet and mesh.contextPatch
// (rpc.ContextGetParams, rpc.ContextSetParams, rpc.ContextPatchParams):
// the params are decoded strictly and checked before the node is asked;
// the answer is the bead's protocol.BeadContext as the node holds it.
func (m methods) beadContext(ctx context.Context, r *rpc.Request) (any, error) {
	var (
		bead, member string
		raw          json.RawMessage
		members      []string
		get          rpc.ContextGetParams
		set          rpc.ContextSetParams
		patch        rpc.ContextPatchParams
		usage        string
		target       any
	)
	switch r.Method {
	case rpc.MethodMeshContextGet:
		target, usage = &get, `{"beadId"}`
	case rpc.MethodMeshContextSet:
		target, usage, member = &set, `{"beadId", "context": {...}, "members"?: [...]}`, "context"
	default:
		target, usage, member = &patch, `{"beadId", "patch": {...}, "members"?: [...]}`, "patch"
	}
	if err := rpc.ObjectParams(r, target, usage); err != nil {
		return nil, err
	}
	switch r.Method {
	case rpc.MethodMeshContextGet:
		bead = get.BeadID
	case rpc.MethodMeshContextSet:
		bead, raw, members = set.BeadID, set.Context, set.Members
	default:
		bead, raw, members = patch.BeadID, patch.Patch, patch.Members
	}
	if bead == "" {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: %s: "beadId" is required (it takes %s)`, r.Method, usage)
	}
	if member != "" && (len(raw) == 0 || raw[0] != '{') {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: %s: %q must be an object (it takes %s)`, r.Method, member, usage)
	}
	var (
		res *protocol.BeadContext
		err error
	)
	switch r.Method {
	case rpc.MethodMeshContextGet:
		res, err = m.n.ContextGet(ctx, bead)
	case rpc.MethodMeshContextSet:
		res, err = m.n.ContextSet(ctx, bead, raw, members)
	default:
		res, err = m.n.ContextPatch(ctx, bead, raw, members)
	}
	if err != nil {
		return nil, protocol.AsError(err)
	}
	return res, nil
}
