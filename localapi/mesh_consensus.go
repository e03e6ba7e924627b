package localapi

import (
	"context"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// consensus serves mesh.consensus (rpc.MethodMeshConsensus): params
// rpc.ConsensusParams, deadlineMs from 1 to rpc.MaxConsensusDeadline;
// the answer is the vote's protocol.ConsensusResult.
func (m methods) consensus(ctx context.Context, r *rpc.Request) (any, error) {
	var p rpc.ConsensusParams
	if err := rpc.ObjectParams(r, &p, `{"agents", "question", "options", "threshold", "deadlineMs", "context"?}`); err != nil {
		return nil, err
	}
	if p.DeadlineMS <= 0 || p.DeadlineMS > rpc.MaxConsensusDeadline.Milliseconds() {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "deadlineMs" must be from 1 to %d`, rpc.MaxConsensusDeadline.Milliseconds())
	}
	res, err := m.n.Consensus(ctx, protocol.ConsensusRequest{Agents: p.Agents, Question: p.Question, Options: p.Options,
		Threshold: p.Threshold, Deadline: time.Duration(p.DeadlineMS) * time.Millisecond, Context: p.Context})
	if err != nil {
		return nil, protocol.AsError(err)
	}
	return res, nil
}
