package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Bounds of a consensus request.
const (
	maxVoters        = 256
	maxVoteOptions   = 32
	maxConsensusWait = time.Hour
)

// Consensus asks each agent to vote on a question through its
// consensus.vote capability, concurrently, until every voter has answered
// or the deadline passes, and decides (seed 004): the option with the most
// valid votes is the decision when its share of the agents asked reaches
// the threshold ("reached"); otherwise "not_reached" when every voter
// answered, or "timed_out" when the missing voters could still have made
// an option reach it. A voter that does not answer, refuses or answers
// outside the options is listed with its error and counted as asked. Each
// valid vote carries the voter's signed response envelope.
func (n *Node) Consensus(ctx context.Context, req protocol.ConsensusRequest) (*protocol.ConsensusResult, error) {
	if err := checkConsensus(req); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(req.Deadline)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	decision := protocol.Decision{ID: protocol.NewID(), Question: req.Question, Options: req.Options, Context: req.Context}
	params, err := json.Marshal(protocol.VoteRequest{Decision: decision, VotingDeadline: deadline.UTC().Truncate(time.Second),
		ConsensusThreshold: req.Threshold, FromAgentID: n.idStr})
	if err != nil {
		return nil, fmt.Errorf("node: encode vote request: %w", err)
	}
	votes := make([]protocol.Vote, len(req.Agents))
	var wg sync.WaitGroup
	for i, a := range req.Agents {
		wg.Go(func() { votes[i] = n.askVote(ctx, a, params, req.Options, time.Until(deadline)) })
	}
	wg.Wait()
	return decide(decision, req, votes), nil
}

func checkConsensus(req protocol.ConsensusRequest) error {
	switch {
	case len(req.Agents) == 0 || len(req.Agents) > maxVoters:
		return protocol.Errorf(protocol.CodeInvalidMessage, "consensus needs 1 to %d agents", maxVoters)
	case req.Question == "":
		return protocol.Errorf(protocol.CodeInvalidMessage, "consensus needs a question")
	case len(req.Options) < 2 || len(req.Options) > maxVoteOptions:
		return protocol.Errorf(protocol.CodeInvalidMessage, "consensus needs 2 to %d options", maxVoteOptions)
	case !(req.Threshold > 0 && req.Threshold <= 1):
		return protocol.Errorf(protocol.CodeInvalidMessage, "threshold %v must be in (0, 1]", req.Threshold)
	case req.Deadline <= 0 || req.Deadline > maxConsensusWait:
		return protocol.Errorf(protocol.CodeInvalidMessage, "deadline %v must be in (0, %v]", req.Deadline, maxConsensusWait)
	}
	seen := map[string]bool{}
	for _, o := range req.Options {
		if o == "" || seen[o] {
			return protocol.Errorf(protocol.CodeInvalidMessage, "options must be distinct and non-empty")
		}
		seen[o] = true
	}
	agents := map[string]bool{}
	for _, a := range req.Agents {
		id, err := sign.ParseAgentID(a)
		if err != nil {
			return protocol.Errorf(protocol.CodeInvalidMessage, "agent %q: %v", a, err)
		}
		if agents[id.String()] {
			return protocol.Errorf(protocol.CodeInvalidMessage, "agent %s is listed twice", id)
		}
		agents[id.String()] = true
	}
	return nil
}

// askVote asks one agent and checks its answer.
func (n *Node) askVote(ctx context.Context, agent string, params json.RawMessage, options []string, timeout time.Duration) protocol.Vote {
	id, _ := sign.ParseAgentID(agent) // checked
	v := protocol.Vote{Agent: id.String()}
	var signed json.RawMessage
	resp, err := n.Call(ctx, protocol.CallRequest{To: v.Agent, Action: protocol.ConsensusCapability, Params: params, Timeout: timeout,
		Signed: func(s json.RawMessage) { signed = s }})
	if err != nil {
		v.Error = protocol.AsError(err).Error()
		return v
	}
	var a protocol.VoteAnswer
	if err := protocol.DecodePayload(resp.Result, "vote", &a); err != nil {
		v.Error = "the answer is not a vote: " + err.Error()
		return v
	}
	if err := a.Validate(options); err != nil {
		v.Error = err.Error()
		return v
	}
	v.Vote, v.Rationale, v.Confidence, v.Signed = a.Vote, a.Rationale, a.Confidence, signed
	return v
}

// decide tallies the votes (see Consensus).
func decide(d protocol.Decision, req protocol.ConsensusRequest, votes []protocol.Vote) *protocol.ConsensusResult {
	res := &protocol.ConsensusResult{DecisionID: d.ID, Question: d.Question, Threshold: req.Threshold, Tally: map[string]int{}, Votes: votes}
	for _, o := range req.Options {
		res.Tally[o] = 0
	}
	missing := 0
	for _, v := range votes {
		if v.Vote != "" {
			res.Tally[v.Vote]++
		} else if isTimeout(v.Error) {
			missing++
		}
	}
	asked := float64(len(req.Agents))
	best, bestN := "", -1
	for _, o := range req.Options { // ties go to the earlier option
		if res.Tally[o] > bestN {
			best, bestN = o, res.Tally[o]
		}
	}
	switch {
	case float64(bestN)/asked >= req.Threshold:
		res.Outcome, res.Decision = protocol.OutcomeReached, best
	case missing > 0 && float64(bestN+missing)/asked >= req.Threshold:
		res.Outcome = protocol.OutcomeTimedOut
	default:
		res.Outcome = protocol.OutcomeNotReached
	}
	return res
}

func isTimeout(msg string) bool { return strings.HasPrefix(msg, string(protocol.CodeTimeout)) }

// VerifyVote checks a signed vote offline: the envelope's signature, that
// it is a successful response from agent, and that its result is a vote
// for one of options.
func VerifyVote(signed json.RawMessage, agent string, options []string) (*protocol.VoteAnswer, error) {
	e, _, err := protocol.OpenJSON(signed)
	if err != nil {
		return nil, err
	}
	from, err := e.Sender()
	if err != nil {
		return nil, err
	}
	want, err := sign.ParseAgentID(agent)
	if err != nil {
		return nil, err
	}
	if from != want {
		return nil, fmt.Errorf("vote signed by %s, not by %s", from, want)
	}
	if e.Type != protocol.TypeResponse {
		return nil, errors.New("not a response envelope")
	}
	resp, err := protocol.DecodeResponse(e)
	if err != nil {
		return nil, err
	}
	var a protocol.VoteAnswer
	if err := protocol.DecodePayload(resp.Result, "vote", &a); err != nil {
		return nil, fmt.Errorf("not a vote: %w", err)
	}
	if err := a.Validate(options); err != nil {
		return nil, err
	}
	return &a, nil
}
