package localapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// errNoDurables is the refusal of a node that keeps no positions.
var errNoDurables = protocol.Errorf(protocol.CodeInvalidMessage, "this node runs no durable subscriptions")

// Durables lists "kept" and "reader", which a subscription uses now,
// with a limit of 4.
func (n *fakeNode) Durables(context.Context) (protocol.DurableList, error) {
	if n.noDurables {
		return protocol.DurableList{}, errNoDurables
	}
	return protocol.DurableList{Limit: 4, Durables: []protocol.DurableInfo{{Name: "kept", Bytes: 12}, {Name: "reader", Bytes: 40, Active: true}}}, nil
}

// ForgetDurable forgets name unless it is in use ("reader"); "kept" is a
// name the fake keeps a position for.
func (n *fakeNode) ForgetDurable(_ context.Context, name string) (bool, error) {
	switch {
	case n.noDurables:
		return false, errNoDurables
	case name == "reader":
		return false, protocol.Errorf(protocol.CodeInvalidMessage, "durable %q is in use on this node", name)
	}
	return name == "kept", nil
}

// TestForgetDurable: mesh.forgetDurable reports whether the node kept a
// position for the name, refuses a name in use and malformed params with
// -32602; a server without Register is -32601.
func TestForgetDurable(t *testing.T) {
	c := rpctest.DialClient(t, serveMethods(t, newFakeNode()))
	if ok, err := c.ForgetDurable(ctxT(t), "kept"); err != nil || !ok {
		t.Fatalf("forget kept: %v %v", ok, err)
	}
	if ok, err := c.ForgetDurable(ctxT(t), "unknown"); err != nil || ok {
		t.Fatalf("forget unknown: %v %v", ok, err)
	}
	for what, params := range map[string]any{
		"in use":     rpc.ForgetDurableParams{Durable: "reader"},
		"empty":      rpc.ForgetDurableParams{},
		"no durable": map[string]any{},
		"extra":      map[string]any{"durable": "x", "pattern": "news:*"},
	} {
		err := c.Call(ctxT(t), rpc.MethodMeshForgetDurable, params, nil)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams {
			t.Errorf("%s: %v, want -32602", what, err)
		}
	}
	if _, err := plainClient(t).ForgetDurable(ctxT(t), "kept"); rpcCode(err) != rpc.CodeMethodNotFound {
		t.Fatalf("mesh.forgetDurable without Register: %v, want -32601", err)
	}
}

// TestDurables: mesh.durables answers the node's names with their sizes,
// which run now and the limit, as the client and the JSON spell them;
// params other than none, {} or [] are -32602, and a node that runs no
// durable subscriptions says so with -32602; a server without Register is
// -32601.
func TestDurables(t *testing.T) {
	c := rpctest.DialClient(t, serveMethods(t, newFakeNode()))
	got, err := c.Durables(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	want := protocol.DurableList{Limit: 4, Durables: []protocol.DurableInfo{{Name: "kept", Bytes: 12}, {Name: "reader", Bytes: 40, Active: true}}}
	if got.Limit != want.Limit || !slices.Equal(got.Durables, want.Durables) {
		t.Fatalf("Durables = %+v, want %+v", got, want)
	}
	var raw json.RawMessage
	if err := c.Call(ctxT(t), rpc.MethodMeshDurables, json.RawMessage(`{}`), &raw); err != nil {
		t.Fatal(err)
	}
	if s := string(raw); s != `{"durables":[{"name":"kept","bytes":12,"active":false},{"name":"reader","bytes":40,"active":true}],"limit":4}` {
		t.Fatalf("mesh.durables answered %s", s)
	}
	for _, params := range []string{`[]`, ` { } `} {
		if err := c.Call(ctxT(t), rpc.MethodMeshDurables, json.RawMessage(params), nil); err != nil {
			t.Errorf("params %s: %v, want accepted", params, err)
		}
	}
	for _, params := range []string{`{"durable":"x"}`, `["x"]`, `{"limit":0}`} {
		err := c.Call(ctxT(t), rpc.MethodMeshDurables, json.RawMessage(params), nil)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, "takes no params") {
			t.Errorf("params %s: %v, want -32602", params, err)
		}
	}
	none := newFakeNode()
	none.noDurables = true
	plain := rpctest.DialClient(t, serveMethods(t, none))
	_, err = plain.Durables(ctxT(t))
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams {
		t.Fatalf("a node without durable subscriptions: %v, want -32602", err)
	}
	if _, err := plain.ForgetDurable(ctxT(t), "kept"); rpcCode(err) != rpc.CodeInvalidParams {
		t.Fatalf("forget on a node without durable subscriptions: %v, want -32602", err)
	}
	if _, err := plainClient(t).Durables(ctxT(t)); rpcCode(err) != rpc.CodeMethodNotFound {
		t.Fatalf("mesh.durables without Register: %v, want -32601", err)
	}
}
