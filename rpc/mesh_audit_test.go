package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// auditMesh is the fake mesh with an audit log that answers every query
// with one entry and remembers the query.
type auditMesh struct {
	*fakemesh.Mesh
	got chan protocol.AuditQuery
}

func (m auditMesh) Audit(_ context.Context, q protocol.AuditQuery) ([]protocol.AuditEntry, error) {
	m.got <- q
	return []protocol.AuditEntry{{ID: "a1", At: time.Unix(1, 0).UTC(), AuditRecord: protocol.AuditRecord{Direction: protocol.CallSent, From: selfID, To: peerID, Capability: "echo", Outcome: "success"}}}, nil
}

// TestMeshAudit: mesh.audit passes a checked query to the node's log;
// members of the wrong type, unknown members and out-of-range values are
// -32602; a mesh without a log is -32601.
func TestMeshAudit(t *testing.T) {
	m := auditMesh{Mesh: fakemesh.New(), got: make(chan protocol.AuditQuery, 1)}
	ts := serveMesh(t, m, m.Mesh)
	cl := dialClient(t, ts.url)
	es, err := cl.Audit(ctxT(t), protocol.AuditQuery{Agent: peerID, Since: time.Unix(100, 0).UTC()})
	if err != nil || len(es) != 1 || es[0].Capability != "echo" {
		t.Fatalf("audit: %+v %v", es, err)
	}
	if q := receive(t, m.got, "the query"); q.Agent != peerID || !q.Since.Equal(time.Unix(100, 0)) || q.Limit != 100 {
		t.Fatalf("query %+v: want the agent, since, and the default limit 100", q)
	}
	for _, params := range []string{
		`{"limit":"5"}`, `{"limit":0.5}`, `{"limit":1001}`, `{"limit":-1}`, `{"agent":5}`, `{"since":"yesterday"}`,
		`{"since":"2026-01-02T00:00:00Z","until":"2026-01-01T00:00:00Z"}`, `{"topic":"x"}`, `[]`,
	} {
		var out json.RawMessage
		err := cl.Call(ctxT(t), rpc.MethodMeshAudit, json.RawMessage(params), &out)
		if rpcCode(err) != rpc.CodeInvalidParams {
			t.Errorf("mesh.audit %s: %v, want -32602", params, err)
		}
	}
	plain := dialClient(t, newTestServer(t).url)
	if _, err := plain.Audit(ctxT(t), protocol.AuditQuery{}); rpcCode(err) != rpc.CodeMethodNotFound {
		t.Fatalf("mesh.audit without a log: %v, want -32601", err)
	}
}

// rpcCode is the JSON-RPC code of err, or 0.
func rpcCode(err error) int {
	var re *rpc.Error
	if errors.As(err, &re) {
		return int(re.Code)
	}
	return 0
}
