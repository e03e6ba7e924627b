package rpc

import (
	"context"
	"encoding/json"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// MethodMeshConsensus asks agents to vote (seed 004).
const MethodMeshConsensus = "mesh.consensus"

// ConsensusParams are the params of mesh.consensus.
type ConsensusParams struct {
	Agents     []string        `json:"agents"`
	Question   string          `json:"question"`
	Options    []string        `json:"options"`
	Threshold  float64         `json:"threshold"`
	DeadlineMS int64           `json:"deadlineMs"`
	Context    json.RawMessage `json:"context,omitempty"`
}

// MaxConsensusDeadline bounds mesh.consensus's deadlineMs.
const MaxConsensusDeadline = time.Hour

// Consensus runs mesh.consensus. The client waits up to the deadline plus
// a grace period.
func (c *Client) Consensus(ctx context.Context, req protocol.ConsensusRequest) (*protocol.ConsensusResult, error) {
	ctx, cancel := context.WithTimeout(ctx, req.Deadline+timeoutGrace)
	defer cancel()
	var res protocol.ConsensusResult
	err := c.Call(ctx, MethodMeshConsensus, ConsensusParams{Agents: req.Agents, Question: req.Question, Options: req.Options,
		Threshold: req.Threshold, DeadlineMS: req.Deadline.Milliseconds(), Context: req.Context}, &res)
	if err != nil {
		if pe := ProtocolError(err); pe != nil {
			return nil, pe
		}
		return nil, err
	}
	return &res, nil
}
