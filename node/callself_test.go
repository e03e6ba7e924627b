package node_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// TestConsensusSelfVoteSigned: a caller that votes in its own consensus
// gets its own vote signed like the others', so VerifyVote checks it.
func TestConsensusSelfVoteSigned(t *testing.T) {
	caller := voter(t, 130, "yes")
	other := voter(t, 131, "yes")
	meshtest.Connect(t, caller, other)
	ctx := meshtest.Context(t, 20*time.Second)
	options := []string{"yes", "no"}
	res, err := caller.Consensus(ctx, protocol.ConsensusRequest{
		Agents: []string{caller.AgentID(), other.AgentID()}, Question: "merge?",
		Options: options, Threshold: 1, Deadline: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome != protocol.OutcomeReached {
		t.Fatalf("outcome %s: %+v", res.Outcome, res.Votes)
	}
	for _, v := range res.Votes {
		if len(v.Signed) == 0 {
			t.Fatalf("the vote of %s has no signed envelope", v.Agent)
		}
		if _, err := node.VerifyVote(v.Signed, v.Agent, options); err != nil {
			t.Errorf("the vote of %s: %v", v.Agent, err)
		}
	}
}

// TestCallSelfParamsOwn: a handler of the calling node itself gets params
// of its own, which the caller changing its bytes once Call has returned
// does not change, whether the caller's were canonical already or not.
func TestCallSelfParamsOwn(t *testing.T) {
	var kept []json.RawMessage
	keep := node.Service{Capability: protocol.Capability{Name: "keep", Description: "keeps its params"},
		Handler: node.HandlerFunc(func(_ context.Context, call *node.Call) (json.RawMessage, error) {
			kept = append(kept, call.Request.Params)
			return json.RawMessage(`{}`), nil
		})}
	n := meshtest.Node(t, 132, node.WithServices(keep))
	ctx := meshtest.Context(t, 20*time.Second)
	for _, tc := range []struct{ name, params, want string }{
		{"canonical", `{"a":1}`, `{"a":1}`},
		{"not canonical", `{ "a": 1 }`, `{"a":1}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kept = kept[:0]
			params := []byte(tc.params)
			if _, err := n.Call(ctx, protocol.CallRequest{To: n.AgentID(), Action: "keep", Params: params}); err != nil {
				t.Fatal(err)
			}
			for i := range params {
				params[i] = ' '
			}
			if len(kept) != 1 || string(kept[0]) != tc.want {
				t.Fatalf("the handler kept %q, want [%s]", kept, tc.want)
			}
		})
	}
}
