package rpc

import (
	"context"
	"encoding/json"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// Consenter is implemented by a Mesh that runs consensus votes (*node.Node
// is one). A server whose mesh is not one answers mesh.consensus with
// -32601.
type Consenter interface {
	Consensus(ctx context.Context, req protocol.ConsensusRequest) (*protocol.ConsensusResult, error)
}

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

func (s *Server) meshConsensus(ctx context.Context, r *Request) (any, error) {
	c, ok := s.mesh.(Consenter)
	if !ok {
		return nil, Errorf(CodeMethodNotFound, "method not found: %s (this node does not run votes)", r.Method)
	}
	var p ConsensusParams
	if len(r.Params) == 0 || r.Params[0] != '{' {
		return nil, Errorf(CodeInvalidParams, `invalid params: mesh.consensus takes {"agents", "question", "options", "threshold", "deadlineMs", "context"?}`)
	}
	if err := decodeStrict(r.Params, &p); err != nil {
		return nil, Errorf(CodeInvalidParams, `invalid params: mesh.consensus: %v (it takes {"agents", "question", "options", "threshold", "deadlineMs", "context"?})`, err)
	}
	if p.DeadlineMS <= 0 || p.DeadlineMS > MaxConsensusDeadline.Milliseconds() {
		return nil, Errorf(CodeInvalidParams, `invalid params: "deadlineMs" must be from 1 to %d`, MaxConsensusDeadline.Milliseconds())
	}
	res, err := c.Consensus(ctx, protocol.ConsensusRequest{Agents: p.Agents, Question: p.Question, Options: p.Options,
		Threshold: p.Threshold, Deadline: time.Duration(p.DeadlineMS) * time.Millisecond, Context: p.Context})
	if err != nil {
		return nil, protocol.AsError(err)
	}
	return res, nil
}

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
