package rpc_test

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// statusMesh is the fake mesh with a declared status.
type statusMesh struct {
	*fakemesh.Mesh
	mu *sync.Mutex
	st *protocol.AgentStatus
}

func (m statusMesh) SetStatus(s protocol.AgentStatus) error {
	if err := s.Check(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	*m.st = s
	return nil
}

func (m statusMesh) DeclaredStatus() protocol.AgentStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	return *m.st
}

// TestMeshSetStatus: mesh.setStatus declares the whole status and answers
// it; wrong types, unknown members and statuses an agent cannot declare
// are -32602 and change nothing.
func TestMeshSetStatus(t *testing.T) {
	m := statusMesh{Mesh: fakemesh.New(), mu: new(sync.Mutex), st: &protocol.AgentStatus{Status: protocol.StatusAvailable}}
	cl := dialClient(t, serveMesh(t, m, m.Mesh).url)
	want := protocol.AgentStatus{Status: protocol.StatusBusy, CurrentBead: "bd-1", MaxConcurrentBeads: 2}
	got, err := cl.SetStatus(ctxT(t), want)
	if err != nil || got != want || m.DeclaredStatus() != want {
		t.Fatalf("setStatus: %+v %v", got, err)
	}
	for _, params := range []string{
		`{}`, `{"status":"stale"}`, `{"status":1}`, `{"status":"busy","currentBead":5}`,
		`{"status":"busy","maxConcurrentBeads":"3"}`, `{"status":"busy","maxConcurrentBeads":-1}`,
		`{"status":"busy","current_bead":"x"}`, `[]`,
	} {
		var out json.RawMessage
		if err := cl.Call(ctxT(t), rpc.MethodMeshSetStatus, json.RawMessage(params), &out); rpcCode(err) != rpc.CodeInvalidParams {
			t.Errorf("mesh.setStatus %s: %v, want -32602", params, err)
		}
	}
	if m.DeclaredStatus() != want {
		t.Fatalf("a refused status changed the declared one: %+v", m.DeclaredStatus())
	}
	plain := dialClient(t, newTestServer(t).url)
	if _, err := plain.SetStatus(ctxT(t), want); rpcCode(err) != rpc.CodeMethodNotFound {
		t.Fatalf("mesh.setStatus on a mesh without status: %v, want -32601", err)
	}
}
