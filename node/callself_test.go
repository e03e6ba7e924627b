package node_test

import (
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
