package rpc

import (
	"context"
	"errors"

	"github.com/meshagent/meshagent/protocol"
)

// MethodMeshAudit queries the node's audit log:
//
//	mesh.audit {"agent"?,"since"?,"until"?,"limit"?,"before"?}
//	           → {"entries":[{"id","at","direction","from","to",
//	              "capability","size","outcome","duration_ms","params"?}]}
//
// newest first; since and until are RFC 3339 times; limit is 1 to
// MaxAuditLimit (default 100); before is the id of the last entry of the
// previous page.
const MethodMeshAudit = "mesh.audit"

// MaxAuditLimit bounds one page of mesh.audit.
const (
	MaxAuditLimit     = 1000
	defaultAuditLimit = 100
)

// AuditResult is the result of mesh.audit.
type AuditResult struct {
	Entries []protocol.AuditEntry `json:"entries"`
}

// CheckAuditQuery checks a query from outside and sets its default limit.
func CheckAuditQuery(q *protocol.AuditQuery) error {
	switch {
	case q.Limit < 0 || q.Limit > MaxAuditLimit:
		return errors.New("limit must be 1 to 1000")
	case !q.Since.IsZero() && !q.Until.IsZero() && !q.Until.After(q.Since):
		return errors.New("until must be after since")
	case len(q.Agent) > protocol.MaxIDLen || len(q.Before) > protocol.MaxIDLen:
		return errors.New("agent and before must be ids")
	}
	if q.Limit == 0 {
		q.Limit = defaultAuditLimit
	}
	return nil
}

// Audit runs mesh.audit.
func (c *Client) Audit(ctx context.Context, q protocol.AuditQuery) ([]protocol.AuditEntry, error) {
	var out AuditResult
	if err := c.Call(ctx, MethodMeshAudit, q, &out); err != nil {
		return nil, err
	}
	return out.Entries, nil
}
