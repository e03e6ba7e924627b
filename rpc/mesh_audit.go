package rpc

import (
	"context"
	"errors"

	"github.com/meshagent/meshagent/protocol"
)

// Auditor is implemented by a Mesh that keeps an audit log of the requests
// it sends and serves (*node.Node is one). A server whose mesh is not one
// answers mesh.audit with -32601; a node that keeps no log answers with
// its CAPABILITY_NOT_SUPPORTED error.
type Auditor interface {
	Audit(ctx context.Context, q protocol.AuditQuery) ([]protocol.AuditEntry, error)
}

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

func (s *Server) registerAuditMethods() {
	s.Handle(MethodMeshAudit, s.meshAudit)
}

func (s *Server) meshAudit(ctx context.Context, r *Request) (any, error) {
	a, ok := s.mesh.(Auditor)
	if !ok {
		return nil, Errorf(CodeMethodNotFound, "method not found: %s (this node keeps no audit log)", r.Method)
	}
	var q protocol.AuditQuery
	if len(r.Params) > 0 && string(r.Params) != "null" {
		if err := objectParams(r, &q, `{"agent"?,"since"?,"until"?,"limit"?,"before"?}`); err != nil {
			return nil, err
		}
	}
	if err := CheckAuditQuery(&q); err != nil {
		return nil, Errorf(CodeInvalidParams, "invalid params: %s: %v", r.Method, err)
	}
	es, err := a.Audit(ctx, q)
	if err != nil {
		return nil, protocol.AsError(err)
	}
	if es == nil {
		es = []protocol.AuditEntry{}
	}
	return AuditResult{Entries: es}, nil
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
