package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// TestLocalAPIMethodsServed: localapi's mesh.* methods are served on the
// local API, and on a relay's public listener to a credential that
// grants them, whether that listener shares the local API's server or has
// its own; the operator's mesh.connections, mesh.status and
// mesh.taskResolve only on the local API, never on a public listener, not
// even one sharing the local API's server.
func TestLocalAPIMethodsServed(t *testing.T) {
	const token = "a-token-of-the-operator"
	tokens, err := rpc.ParseTokens([]byte(`{"tokens":[{"name":"ops","token":"` + token + `","methods":["mesh.*"]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name     string
		api      bool
		operator bool // mesh.connections on the public listener
	}{
		{"public listener sharing the local API", true, false},
		{"public listener on its own", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			caps := filepath.Join(dir, "caps.json")
			writeCaps(t, caps, "echo")
			opts := append(ownOptions(t, 305+i, dir, caps), WithPublic(Public{Addr: "127.0.0.1:0", Tokens: tokens}))
			if tc.api {
				opts = append(opts, WithAPI("127.0.0.1:0"))
			}
			d, err := Start(t.Context(), opts...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = d.Close(context.Background()) })
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			dial := func(url string, opts ...rpc.ClientOption) *rpc.Client {
				cl, err := rpc.Dial(ctx, url, opts...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = cl.Close() })
				return cl
			}
			want := protocol.AgentStatus{Status: protocol.StatusBusy, CurrentBead: "bd-1"}
			check := func(where string, cl *rpc.Client, operator bool) {
				if got, err := cl.SetStatus(ctx, want); err != nil || got != want {
					t.Errorf("%s: mesh.setStatus: %+v %v", where, got, err)
				}
				if _, err := cl.ContextGet(ctx, "bead-1"); err != nil {
					t.Errorf("%s: mesh.contextGet: %v", where, err)
				}
				// Served, whatever the lone node's mesh answers.
				served := func(method string, err error) {
					var re *rpc.Error
					if errors.As(err, &re) && re.Code == rpc.CodeMethodNotFound {
						t.Errorf("%s: %s: %v", where, method, err)
					}
				}
				_, err := cl.Discover(ctx, "echo", false, 100*time.Millisecond, nil)
				served(rpc.MethodMeshDiscover, err)
				_, err = cl.Durables(ctx)
				served(rpc.MethodMeshDurables, err)
				_, err = cl.ForgetDurable(ctx, "none")
				served(rpc.MethodMeshForgetDurable, err)
				_, err = cl.Tasks(ctx, "")
				served(rpc.MethodMeshTasks, err)
				_, err = cl.Task(ctx, "none", "", false)
				served(rpc.MethodMeshTaskStatus, err)
				_, err = cl.TaskWait(ctx, "none", time.Millisecond)
				served(rpc.MethodMeshTaskWait, err)
				_, err = cl.Submit(ctx, rpc.SubmitParams{Capability: "echo"}) // -32602: no agentId
				served(rpc.MethodMeshSubmit, err)
				// What the node's servers are built with (nodeServes): its
				// topics, its durable subscriptions, and mesh.call choosing
				// the provider.
				_, err = cl.Publish(ctx, "news:1", json.RawMessage(`{}`), nil, 100*time.Millisecond)
				served(rpc.MethodMeshPublish, err)
				_, err = cl.SubscribeDurable(ctx, "news:*", "reader-"+strings.ReplaceAll(where, " ", "-"), func(protocol.TopicMessage) error { return nil })
				if err != nil {
					t.Errorf("%s: durable mesh.subscribe: %v", where, err)
				}
				_, _, err = cl.MeshCallAny(ctx, protocol.CallRequest{Action: "echo", Params: json.RawMessage(`{}`), Timeout: 2 * time.Second}, nil)
				if err != nil && strings.Contains(err.Error(), `"agentId" is required`) {
					t.Errorf("%s: mesh.call without agentId: %v", where, err)
				}
				// The operator's decision: on the local API only.
				_, err = cl.TaskResolve(ctx, "none", true, "")
				var re *rpc.Error
				if isNotFound := errors.As(err, &re) && re.Code == rpc.CodeMethodNotFound; isNotFound == operator {
					t.Errorf("%s: %s: %v (operator's: %v)", where, rpc.MethodMeshTaskResolve, err, operator)
				}
				if caps, err := cl.Capabilities(ctx); operator && (err != nil || len(caps) != 1 || caps[0].Name != "echo") {
					t.Errorf("%s: mesh.capabilities: %+v %v", where, caps, err)
				}
				for _, method := range []string{rpc.MethodMeshConnections, rpc.MethodMeshStatus, rpc.MethodMeshCapabilities} {
					var res json.RawMessage
					err := cl.Call(ctx, method, nil, &res)
					var re *rpc.Error
					switch {
					case operator && err != nil:
						t.Errorf("%s: %s: %v", where, method, err)
					case !operator && (!errors.As(err, &re) || re.Code != rpc.CodeMethodNotFound):
						t.Errorf("%s: %s: %v, want -32601", where, method, err)
					}
				}
			}
			if tc.api {
				check("local API", dial(d.APIAddr()), true)
			}
			check("public listener", dial("ws://"+d.PublicAddr()+"/", rpc.WithHTTPHeader(http.Header{"Authorization": {"Bearer " + token}})), tc.operator)
		})
	}
}
