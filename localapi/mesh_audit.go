package localapi

import (
	"context"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// audit serves mesh.audit (rpc.MethodMeshAudit): the query, checked by
// rpc.CheckAuditQuery (absent params are the default query), to the
// node's log; a node that keeps no log answers with its
// CAPABILITY_NOT_SUPPORTED error.
func (m methods) audit(ctx context.Context, r *rpc.Request) (any, error) {
	var q protocol.AuditQuery
	if len(r.Params) > 0 && string(r.Params) != "null" {
		if err := rpc.ObjectParams(r, &q, `{"agent"?,"since"?,"until"?,"limit"?,"before"?}`); err != nil {
			return nil, err
		}
	}
	if err := rpc.CheckAuditQuery(&q); err != nil {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: %s: %v", r.Method, err)
	}
	es, err := m.n.Audit(ctx, q)
	if err != nil {
		return nil, protocol.AsError(err)
	}
	if es == nil {
		es = []protocol.AuditEntry{}
	}
	return rpc.AuditResult{Entries: es}, nil
}
