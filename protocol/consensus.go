package protocol

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// ConsensusCapability is the capability through which an agent votes
// (seed 004's consensus_request / consensus_vote). An agent that votes
// declares it like any capability, with a handler that answers a
// VoteRequest with a VoteAnswer.
const ConsensusCapability = "consensus.vote"

// Consensus outcomes.
const (
	OutcomeReached    = "reached"     // an option reached the threshold
	OutcomeNotReached = "not_reached" // every voter answered, none did
	OutcomeTimedOut   = "timed_out"   // voters missing at the deadline could still have decided it
)

// VoteRequest is what each voter's consensus.vote handler receives (seed
// 004's consensus_request).
type VoteRequest struct {
	Decision           Decision  `json:"decision"`
	VotingDeadline     time.Time `json:"voting_deadline"`
	ConsensusThreshold float64   `json:"consensus_threshold"`
	FromAgentID        string    `json:"from_agent_id"`
}

// Decision is the question put to the vote.
type Decision struct {
	ID       string          `json:"id"`
	Question string          `json:"question"`
	Options  []string        `json:"options"`
	Context  json.RawMessage `json:"context,omitempty"`
}

// VoteAnswer is a voter's result (seed 004's consensus_vote).
type VoteAnswer struct {
	Vote       string  `json:"vote"`
	Rationale  string  `json:"rationale,omitempty"`
	Confidence float64 `json:"confidence"`
}

// Validate checks an answer against the options.
func (a VoteAnswer) Validate(options []string) error {
	if !slices.Contains(options, a.Vote) {
		return fmt.Errorf("vote %q is not one of the options %v", a.Vote, options)
	}
	if a.Confidence < 0 || a.Confidence > 1 {
		return fmt.Errorf("confidence %v is outside [0, 1]", a.Confidence)
	}
	return nil
}

// ConsensusRequest asks agents to vote.
type ConsensusRequest struct {
	Agents    []string        `json:"agents"`
	Question  string          `json:"question"`
	Options   []string        `json:"options"`
	Threshold float64         `json:"threshold"`
	Deadline  time.Duration   `json:"-"`
	Context   json.RawMessage `json:"context,omitempty"`
}

// Vote is one voter's part of a consensus result.
type Vote struct {
	Agent      string  `json:"agent"`
	Vote       string  `json:"vote,omitempty"`
	Rationale  string  `json:"rationale,omitempty"`
	Confidence float64 `json:"confidence,omitempty"`
	// Signed is the voter's signed response envelope (embedded JSON form):
	// `meshagent verify` checks it offline.
	Signed json.RawMessage `json:"signed,omitempty"`
	// Error says why there is no valid vote (a timeout, a refusal, an
	// answer that is not one of the options).
	Error string `json:"error,omitempty"`
}

// ConsensusResult is the outcome of a vote.
type ConsensusResult struct {
	DecisionID string         `json:"decision_id"`
	Question   string         `json:"question"`
	Outcome    string         `json:"outcome"`
	Decision   string         `json:"decision,omitempty"`
	Threshold  float64        `json:"threshold"`
	Tally      map[string]int `json:"tally"`
	Votes      []Vote         `json:"votes"`
}
