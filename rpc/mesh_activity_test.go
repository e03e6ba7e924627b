package rpc_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// activityMesh is a fakeMesh that lists connections and recent calls.
type activityMesh struct {
	*fakemesh.Mesh
	conns []protocol.ConnInfo
	calls []protocol.CallRecord
}

func (m activityMesh) Conns() []protocol.ConnInfo         { return m.conns }
func (m activityMesh) RecentCalls() []protocol.CallRecord { return m.calls }

func TestActivityMethods(t *testing.T) {
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	mesh := fakemesh.New()
	am := activityMesh{Mesh: mesh,
		conns: []protocol.ConnInfo{
			{AgentID: "a", RemoteAddr: "/ip4/10.0.0.1/tcp/4001", Direction: "outbound", Opened: at},
			{AgentID: "b", RemoteAddr: "/ip4/10.0.0.2/tcp/4001/p2p/r/p2p-circuit", Direction: "inbound", Relayed: true},
		},
		calls: []protocol.CallRecord{{At: at, Direction: protocol.CallSent, Capability: "echo", AgentID: "a", Outcome: "success", DurationMS: 1.5}},
	}
	ctx := context.Background()

	t.Run("served with a Control", func(t *testing.T) {
		c := dialClient(t, serveMesh(t, am, mesh, rpc.WithControl(&fakeControl{level: "info"})).url)
		var conns []protocol.ConnInfo
		if err := c.Call(ctx, rpc.MethodMeshConnections, nil, &conns); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(conns, am.conns) {
			t.Fatalf("mesh.connections = %+v, want %+v", conns, am.conns)
		}
		var calls []protocol.CallRecord
		if err := c.Call(ctx, rpc.MethodMeshRecentCalls, nil, &calls); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(calls, am.calls) {
			t.Fatalf("mesh.recentCalls = %+v, want %+v", calls, am.calls)
		}
		var re *rpc.Error
		if err := c.Call(ctx, rpc.MethodMeshRecentCalls, map[string]any{"x": 1}, nil); !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams {
			t.Fatalf("with params: %v, want invalid params", err)
		}
	})
	t.Run("empty is an empty list", func(t *testing.T) {
		c := dialClient(t, serveMesh(t, activityMesh{Mesh: mesh}, mesh, rpc.WithControl(&fakeControl{level: "info"})).url)
		var res any
		if err := c.Call(ctx, rpc.MethodMeshConnections, nil, &res); err != nil {
			t.Fatal(err)
		}
		if l, ok := res.([]any); !ok || len(l) != 0 {
			t.Fatalf("mesh.connections with none = %#v, want []", res)
		}
	})
	t.Run("not served without a Control", func(t *testing.T) {
		c := dialClient(t, serveMesh(t, am, mesh).url)
		for _, m := range []string{rpc.MethodMeshConnections, rpc.MethodMeshRecentCalls} {
			var re *rpc.Error
			if err := c.Call(ctx, m, nil, nil); !errors.As(err, &re) || re.Code != rpc.CodeMethodNotFound {
				t.Errorf("%s without a Control: %v, want method not found", m, err)
			}
		}
	})
}
