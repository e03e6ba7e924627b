package node

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// maxSentTasks bounds the requests whose provider a requester remembers.
const maxSentTasks = 4096

// sentTasks remembers, on the requester's side, which agent each request
// went to, so that TaskStatus and CancelTask need only the task id. The
// oldest are forgotten first.
type sentTasks struct {
	mu    sync.Mutex
	m     map[string]peer.ID
	order []string
}

// remember notes the provider of a request this node sent.
func (st *sentTasks) remember(id string, provider peer.ID) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.m == nil {
		st.m = map[string]peer.ID{}
	}
	if len(st.order) >= maxSentTasks {
		delete(st.m, st.order[0])
		st.order = st.order[1:]
	}
	st.m[id] = provider
	st.order = append(st.order, id)
}

// provider returns the agent a request went to.
func (st *sentTasks) provider(id string) (peer.ID, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	p, ok := st.m[id]
	return p, ok
}

// TaskStatus asks the provider of a request this node sent (provider, or
// "" for the one the node remembers) for its task: state, history,
// progress so far and result.
func (n *Node) TaskStatus(ctx context.Context, taskID, provider string) (*protocol.Task, error) {
	return n.taskCall(ctx, protocol.TaskStatusCapability, taskID, provider)
}

// CancelTask asks the provider to cancel a request this node sent; the
// request's caller then gets an error, and the task ends CANCELLED.
func (n *Node) CancelTask(ctx context.Context, taskID, provider string) (*protocol.Task, error) {
	return n.taskCall(ctx, protocol.TaskCancelCapability, taskID, provider)
}

func (n *Node) taskCall(ctx context.Context, action, taskID, provider string) (*protocol.Task, error) {
	if taskID == "" {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "a task id is required")
	}
	to := provider
	if to == "" {
		p, ok := n.sent.provider(taskID)
		if !ok {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "this node sent no request %s that it remembers; name its agent", taskID)
		}
		to = p.String()
	} else if _, err := sign.ParseAgentID(to); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "agent %q: %v", to, err)
	}
	params, _ := json.Marshal(protocol.TaskRef{TaskID: taskID})
	resp, err := n.Call(ctx, protocol.CallRequest{To: to, Action: action, Params: params})
	if err != nil {
		return nil, err
	}
	var t protocol.Task
	if err := protocol.DecodePayload(resp.Result, "task", &t); err != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "the provider's task is not readable: %v", err)
	}
	return &t, nil
}
