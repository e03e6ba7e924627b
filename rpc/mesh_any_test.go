package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// anyMesh is the fake mesh that chooses the provider itself: peerID
// answers every call without an agent id.
type anyMesh struct{ *fakemesh.Mesh }

func (m anyMesh) CallAny(ctx context.Context, req protocol.CallRequest) (*protocol.Response, string, error) {
	if req.To != "" {
		return nil, "", fmt.Errorf("CallAny got a target %q", req.To)
	}
	resp, err := m.Call(ctx, req)
	return resp, peerID, err
}

func TestMeshCallAny(t *testing.T) {
	mesh := fakemesh.New()
	ts := serveMesh(t, mesh, mesh, rpc.WithAnyCaller(anyMesh{mesh}))
	c := dialClient(t, ts.url)

	var got []string
	progress := func(r *protocol.Response) { got = append(got, string(r.Result)) }
	resp, agent, err := c.MeshCallAny(ctxT(t), protocol.CallRequest{Action: "steps", Params: json.RawMessage(`{"n":3}`)}, progress)
	if err != nil {
		t.Fatal(err)
	}
	if agent != peerID || string(resp.Result) != `{"done":true}` || len(got) != 3 {
		t.Fatalf("agent %q, result %s, progress %v", agent, resp.Result, got)
	}

	// On the wire: no agentId in, the provider's agentId out.
	var raw map[string]json.RawMessage
	if err := c.Call(ctxT(t), rpc.MethodMeshCall, map[string]any{"capability": "echo"}, &raw); err != nil {
		t.Fatal(err)
	}
	if string(raw["agentId"]) != `"`+peerID+`"` || string(raw["status"]) != `"success"` {
		t.Fatalf("mesh.call without agentId returned %v", raw)
	}
	// A call naming its agent returns the response alone, as before.
	clear(raw)
	if err := c.Call(ctxT(t), rpc.MethodMeshCall, map[string]any{"agentId": peerID, "capability": "echo"}, &raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw["agentId"]; ok {
		t.Fatalf("mesh.call with agentId returned an agentId: %v", raw)
	}

	err = c.Call(ctxT(t), rpc.MethodMeshCall, map[string]any{"agentId": "", "capability": "echo"}, nil)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams {
		t.Fatalf("empty agentId: %v", err)
	}

	params := json.RawMessage(`{"code":"RATE_LIMITED","message":"slow down"}`)
	_, _, err = c.MeshCallAny(ctxT(t), protocol.CallRequest{Action: "fail", Params: params}, nil)
	if protocol.CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("got %v, want RATE_LIMITED", err)
	}
	if _, _, err := c.MeshCallAny(ctxT(t), protocol.CallRequest{To: peerID, Action: "echo"}, nil); err == nil {
		t.Fatal("MeshCallAny with a target succeeded")
	}
	if _, err := c.MeshCall(ctxT(t), protocol.CallRequest{Action: "echo"}, nil); err == nil {
		t.Fatal("MeshCall without a target succeeded")
	}
}

// A mesh that cannot choose still requires agentId.
func TestMeshCallAnyUnsupported(t *testing.T) {
	ts := newTestServer(t)
	c := dialClient(t, ts.url)
	_, _, err := c.MeshCallAny(ctxT(t), protocol.CallRequest{Action: "echo"}, nil)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || ts.mesh.Calls.Load() != 0 {
		t.Fatalf("got %v after %d calls", err, ts.mesh.Calls.Load())
	}
}
