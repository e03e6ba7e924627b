package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// voter answers consensus.vote with a fixed vote, or never ("" ) until
// its request's context ends.
func voter(t *testing.T, key int, vote string) *node.Node {
	t.Helper()
	h := node.HandlerFunc(func(ctx context.Context, call *node.Call) (json.RawMessage, error) {
		var req protocol.VoteRequest
		if err := json.Unmarshal(call.Request.Params, &req); err != nil || req.Decision.Question == "" || len(req.Decision.Options) == 0 {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "not a vote request: %s", call.Request.Params)
		}
		if vote == "" {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return json.Marshal(protocol.VoteAnswer{Vote: vote, Rationale: "because " + vote, Confidence: 0.8})
	})
	return meshtest.Node(t, key, node.WithServices(node.Service{Capability: protocol.Capability{Name: protocol.ConsensusCapability}, Handler: h}))
}

func TestConsensus(t *testing.T) {
	caller := meshtest.Node(t, 90)
	voters := map[string]*node.Node{}
	for i, v := range []string{"yes", "yes2", "no", "defer", "silent", "maybe"} {
		vote := strings.TrimSuffix(v, "2")
		if v == "silent" {
			vote = ""
		}
		voters[v] = voter(t, 91+i, vote)
		meshtest.Connect(t, caller, voters[v])
	}
	ids := func(names ...string) []string {
		var out []string
		for _, n := range names {
			out = append(out, voters[n].AgentID())
		}
		return out
	}
	options := []string{"yes", "no", "defer"}
	for _, tc := range []struct {
		name     string
		voters   []string
		outcome  string
		decision string
		tally    map[string]int
	}{
		{"a silent voter is counted, the outcome still decided", []string{"yes", "yes2", "silent"}, protocol.OutcomeReached, "yes", map[string]int{"yes": 2, "no": 0, "defer": 0}},
		{"split vote", []string{"yes", "no", "defer"}, protocol.OutcomeNotReached, "", map[string]int{"yes": 1, "no": 1, "defer": 1}},
		{"missing votes could have decided it", []string{"yes", "silent", "no"}, protocol.OutcomeTimedOut, "", map[string]int{"yes": 1, "no": 1, "defer": 0}},
		{"a vote outside the options is invalid", []string{"yes", "yes2", "maybe"}, protocol.OutcomeReached, "yes", map[string]int{"yes": 2, "no": 0, "defer": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := caller.Consensus(meshtest.Context(t, 20*time.Second), protocol.ConsensusRequest{
				Agents: ids(tc.voters...), Question: "Refactor the auth module?", Options: options, Threshold: 0.66, Deadline: time.Second,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != tc.outcome || res.Decision != tc.decision || len(res.Votes) != len(tc.voters) || res.DecisionID == "" {
				t.Fatalf("result %+v, want outcome %s decision %q", res, tc.outcome, tc.decision)
			}
			for o, n := range tc.tally {
				if res.Tally[o] != n {
					t.Errorf("tally %v, want %v", res.Tally, tc.tally)
				}
			}
			for i, v := range res.Votes {
				name := tc.voters[i]
				switch {
				case name == "silent":
					if !strings.HasPrefix(v.Error, "TIMEOUT") || v.Signed != nil {
						t.Errorf("silent voter: %+v", v)
					}
				case name == "maybe":
					if !strings.Contains(v.Error, `"maybe" is not one of the options`) {
						t.Errorf("invalid voter: %+v", v)
					}
				default:
					a, err := node.VerifyVote(v.Signed, v.Agent, options)
					if err != nil || a.Vote != v.Vote || v.Rationale != "because "+v.Vote {
						t.Errorf("vote %+v does not verify: %v", v, err)
					}
				}
			}
		})
	}

	t.Run("a forged vote is rejected", func(t *testing.T) {
		res, err := caller.Consensus(meshtest.Context(t, 20*time.Second), protocol.ConsensusRequest{
			Agents: ids("no"), Question: "Ship it?", Options: options, Threshold: 0.5, Deadline: 5 * time.Second,
		})
		if err != nil || len(res.Votes) != 1 || res.Votes[0].Signed == nil {
			t.Fatalf("%+v %v", res, err)
		}
		v := res.Votes[0]
		forged := bytes.Replace(v.Signed, []byte(`\"vote\":\"no\"`), []byte(`\"vote\":\"yes\"`), 1)
		if bytes.Equal(forged, v.Signed) {
			forged = bytes.Replace(v.Signed, []byte(`"vote":"no"`), []byte(`"vote":"yes"`), 1)
		}
		if bytes.Equal(forged, v.Signed) {
			t.Fatalf("could not find the vote in %s", v.Signed)
		}
		if _, err := node.VerifyVote(forged, v.Agent, options); err == nil {
			t.Fatal("a vote changed after signing verified")
		}
		if _, err := node.VerifyVote(v.Signed, voters["yes"].AgentID(), options); err == nil {
			t.Fatal("a vote verified as another agent's")
		}
	})

	t.Run("bad requests", func(t *testing.T) {
		for _, req := range []protocol.ConsensusRequest{
			{Question: "q", Options: options, Threshold: 0.5, Deadline: time.Second},
			{Agents: ids("yes"), Options: options, Threshold: 0.5, Deadline: time.Second},
			{Agents: ids("yes"), Question: "q", Options: []string{"only"}, Threshold: 0.5, Deadline: time.Second},
			{Agents: ids("yes"), Question: "q", Options: []string{"a", "a"}, Threshold: 0.5, Deadline: time.Second},
			{Agents: ids("yes"), Question: "q", Options: options, Threshold: 1.5, Deadline: time.Second},
			{Agents: ids("yes"), Question: "q", Options: options, Threshold: 0.5},
			{Agents: []string{"bob"}, Question: "q", Options: options, Threshold: 0.5, Deadline: time.Second},
			{Agents: ids("yes", "yes"), Question: "q", Options: options, Threshold: 0.5, Deadline: time.Second},
		} {
			if _, err := caller.Consensus(context.Background(), req); protocol.CodeOf(err) != protocol.CodeInvalidMessage {
				t.Errorf("%+v: %v, want INVALID_MESSAGE", req, err)
			}
		}
	})
}
