package rpc_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

func TestMeshCallReceipt(t *testing.T) {
	mesh := fakemesh.New()
	ts := serveMesh(t, mesh, mesh, rpc.WithAnyCaller(anyMesh{mesh}))
	c := dialClient(t, ts.url)

	// The Go client asks for one when req.Signed is set.
	var receipt json.RawMessage
	resp, err := c.MeshCall(ctxT(t), protocol.CallRequest{To: peerID, Action: "echo", Signed: func(s json.RawMessage) { receipt = s }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := protocol.OpenReceipt(receipt)
	if err != nil {
		t.Fatalf("OpenReceipt: %v\n%s", err, receipt)
	}
	if err := r.Check(peerID, resp.CorrelationID); err != nil || string(r.Response.Result) != string(resp.Result) {
		t.Fatalf("receipt %s for %s: %v", r.Response.Result, resp.Result, err)
	}
	receipt = nil
	if _, _, err := c.MeshCallAny(ctxT(t), protocol.CallRequest{Action: "echo", Signed: func(s json.RawMessage) { receipt = s }}, nil); err != nil || receipt == nil {
		t.Fatalf("MeshCallAny: receipt %s, %v", receipt, err)
	}

	// On the wire: "receipt" only when asked for.
	for _, tc := range []struct {
		name          string
		params        map[string]any
		agent, signed bool
	}{
		{"named, asked", map[string]any{"agentId": peerID, "capability": "echo", "receipt": true}, false, true},
		{"named, not asked", map[string]any{"agentId": peerID, "capability": "echo", "receipt": false}, false, false},
		{"named, left out", map[string]any{"agentId": peerID, "capability": "echo"}, false, false},
		{"any, asked", map[string]any{"capability": "echo", "receipt": true}, true, true},
		{"any, left out", map[string]any{"capability": "echo"}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var raw map[string]json.RawMessage
			if err := c.Call(ctxT(t), rpc.MethodMeshCall, tc.params, &raw); err != nil {
				t.Fatal(err)
			}
			if _, ok := raw["agentId"]; ok != tc.agent {
				t.Errorf("agentId present: %v, want %v (%v)", ok, tc.agent, raw)
			}
			rc, ok := raw["receipt"]
			if ok != tc.signed {
				t.Fatalf("receipt present: %v, want %v (%v)", ok, tc.signed, raw)
			}
			if !ok {
				return
			}
			r, err := protocol.OpenReceipt(rc)
			if err != nil {
				t.Fatal(err)
			}
			var corr string
			if err := json.Unmarshal(raw["correlationId"], &corr); err != nil {
				t.Fatal(err)
			}
			if err := r.Check(peerID, corr); err != nil {
				t.Error(err)
			}
		})
	}

	for _, bad := range []any{"yes", 1, map[string]any{}} {
		err := c.Call(ctxT(t), rpc.MethodMeshCall, map[string]any{"agentId": peerID, "capability": "echo", "receipt": bad}, nil)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || re.Message != `invalid params: "receipt" must be true or false` {
			t.Errorf("receipt %v: got %v, want -32602", bad, err)
		}
	}
}
