package localapi

import (
	"context"
	"encoding/json"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// Node is what the local API's mesh.* methods served from this package
// need of a node. *node.Node satisfies it (checked at compile time in
// daemon).
type Node interface {
	// AuditLog answers mesh.audit.
	AuditLog
	// BeadContexts answers mesh.contextGet, mesh.contextSet and
	// mesh.contextPatch.
	BeadContexts
	// Consensus runs mesh.consensus's vote.
	Consensus(ctx context.Context, req protocol.ConsensusRequest) (*protocol.ConsensusResult, error)
	// SetStatus replaces the status the agent declares in its heartbeats
	// (an error when s is not one an agent may declare), and
	// DeclaredStatus is the status declared now: mesh.setStatus.
	SetStatus(s protocol.AgentStatus) error
	DeclaredStatus() protocol.AgentStatus
	// Conns are the node's open connections, each direct or relayed:
	// mesh.connections.
	Conns() []protocol.ConnInfo
	// RecentCalls are the node's last calls sent and served, newest
	// first: mesh.recentCalls.
	RecentCalls() []protocol.CallRecord
	// Discover streams the agents offering query (a capability name, or
	// a keyword if byKeyword), each with only its matching capabilities,
	// as they are confirmed; the channel closes when the search ends or
	// ctx is done. Peers is the node's peer table, by which
	// mesh.discover's filter judges an agent found.
	Discover(ctx context.Context, query string, byKeyword bool) (<-chan protocol.PeerInfo, error)
	Peers() []protocol.PeerInfo
	// Durables lists the durable subscription names the node keeps
	// positions for, sorted, each with its position's size and whether a
	// subscription of it runs on the node now, and the most names it
	// keeps: mesh.durables. ForgetDurable deletes name's position and
	// reports whether there was one: mesh.forgetDurable. Both refuse with
	// a *protocol.Error of INVALID_MESSAGE a node that keeps no positions,
	// and ForgetDurable a name in use on the node.
	Durables(ctx context.Context) (protocol.DurableList, error)
	ForgetDurable(ctx context.Context, name string) (bool, error)
	// TaskStatus and CancelTask answer mesh.taskStatus and
	// mesh.taskCancel: a request this node sent, by its task id, and its
	// provider (empty: the one the node remembers).
	TaskStatus(ctx context.Context, taskID, provider string) (*protocol.Task, error)
	CancelTask(ctx context.Context, taskID, provider string) (*protocol.Task, error)
	// Submit, TaskWait and Tasks answer mesh.submit, mesh.taskWait and
	// mesh.tasks: detached tasks, which the node keeps on disk.
	Submit(ctx context.Context, req protocol.CallRequest, deadline time.Duration) (*protocol.Submitted, error)
	TaskWait(ctx context.Context, taskID string, poll time.Duration, progress func(json.RawMessage)) (*protocol.SubmittedTask, error)
	Tasks(ctx context.Context, state protocol.TaskState) ([]protocol.TaskInfo, error)
	// TaskResolve approves or rejects a task the node serves that awaits
	// a decision (ESCALATED), and returns the task as it stands after it;
	// a task in another state is an INVALID_MESSAGE error: the operator's
	// mesh.taskResolve.
	TaskResolve(ctx context.Context, taskID string, approve bool, reason string) (*protocol.Task, error)
}

// Register serves n's mesh.* methods on srv: mesh.audit,
// mesh.consensus, mesh.contextGet, mesh.contextSet, mesh.contextPatch,
// mesh.setStatus, mesh.discover, mesh.durables, mesh.forgetDurable,
// mesh.taskStatus, mesh.taskCancel, mesh.submit, mesh.taskWait and
// mesh.tasks. Their names, params and results are rpc's
// (rpc.MethodMeshAudit, rpc.ConsensusParams, …), which its Go client
// calls. A node's local API and a relay's public listener both serve
// them; on the public listener only to credentials that grant them.
func Register(srv *rpc.Server, n Node) {
	m := methods{n: n}
	srv.Handle(rpc.MethodMeshAudit, m.audit)
	srv.Handle(rpc.MethodMeshConsensus, m.consensus)
	srv.Handle(rpc.MethodMeshContextGet, m.beadContext)
	srv.Handle(rpc.MethodMeshContextSet, m.beadContext)
	srv.Handle(rpc.MethodMeshContextPatch, m.beadContext)
	srv.Handle(rpc.MethodMeshSetStatus, m.setStatus)
	srv.Handle(rpc.MethodMeshDiscover, m.discover)
	srv.Handle(rpc.MethodMeshDurables, m.durables)
	srv.Handle(rpc.MethodMeshForgetDurable, m.forgetDurable)
	srv.Handle(rpc.MethodMeshTaskStatus, m.task)
	srv.Handle(rpc.MethodMeshTaskCancel, m.task)
	srv.Handle(rpc.MethodMeshSubmit, m.submit)
	srv.Handle(rpc.MethodMeshTaskWait, m.taskWait)
	srv.Handle(rpc.MethodMeshTasks, m.tasks)
}

// RegisterOperator serves on srv what n's operator watches (what the
// status page polls) and decides: mesh.connections and mesh.recentCalls,
// which take no params and answer a list ([] when empty), and
// mesh.taskResolve. A peer list with addresses, the calls of other agents
// and the decisions on escalated tasks are not for a relay's public
// clients: register them only on the server of a node's local API, the
// one with rpc.WithControl, as daemon does. They are rpc.Server.HandleLocal's,
// answered -32601 on a public listener even where it shares that server.
func RegisterOperator(srv *rpc.Server, n Node) {
	srv.HandleLocal(rpc.MethodMeshTaskResolve, methods{n: n}.taskResolve)
	srv.HandleLocal(rpc.MethodMeshConnections, func(_ context.Context, r *rpc.Request) (any, error) {
		if err := rpc.NoParams(r); err != nil {
			return nil, err
		}
		return orEmpty(n.Conns()), nil
	})
	srv.HandleLocal(rpc.MethodMeshRecentCalls, func(_ context.Context, r *rpc.Request) (any, error) {
		if err := rpc.NoParams(r); err != nil {
			return nil, err
		}
		return orEmpty(n.RecentCalls()), nil
	})
}

// orEmpty makes a nil slice encode as [] rather than null.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// methods serves the mesh.* methods of Register over a node.
type methods struct{ n Node }
