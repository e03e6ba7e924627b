package node

import (
	"context"
	"encoding/json"

	"github.com/meshagent/meshagent/metrics"
	"github.com/meshagent/meshagent/protocol"
)

// builtins returns the node's own capabilities: task.status and
// task.cancel, which read the provider's task table, and agent.message,
// direct messages, and a2a.card when the node was given WithAgentCard. They are ordinary services on the request path: the
// registry answers them before any registered service of the same name,
// they are not announced in hello, and they do not run as tasks
// themselves (a task's status is not a task; messages are deduplicated by
// message id).
func (n *Node) builtins() []*service {
	tasks := HandlerFunc(func(_ context.Context, c *Call) (json.RawMessage, error) {
		return n.taskRequest(requester{agent: c.From, client: c.OnBehalfOf}, c.Request)
	})
	out := []*service{
		// A requester asks only about its own tasks (the table is keyed by
		// requester), so no ACL or policy rule applies.
		{Service: Service{Capability: protocol.Capability{Name: protocol.TaskStatusCapability}, Handler: tasks}, admit: admitAll},
		{Service: Service{Capability: protocol.Capability{Name: protocol.TaskCancelCapability}, Handler: tasks}, admit: admitAll},
		// Only the provider of a task this node submitted is heard.
		{Service: Service{Capability: protocol.Capability{Name: protocol.TaskResultCapability}, Handler: HandlerFunc(func(ctx context.Context, c *Call) (json.RawMessage, error) {
			return n.receiveTaskResult(ctx, requester{agent: c.From, client: c.OnBehalfOf}, c.Request)
		})}, admit: admitAll},
		{Service: Service{Capability: protocol.Capability{Name: protocol.MessageCapability}, Handler: HandlerFunc(func(ctx context.Context, c *Call) (json.RawMessage, error) {
			return n.receiveMessage(ctx, c.From, c.Request)
		})}, admit: n.admitMessage},
		{Service: Service{Capability: protocol.Capability{Name: protocol.MessageBatchCapability}, Handler: HandlerFunc(n.receiveMessages)}, admit: n.admitMessage},
	}
	if n.cfg.AgentCard != nil {
		out = append(out, n.cardBuiltin())
	}
	return out
}

func admitAll(requester, *protocol.Request) error { return nil }

// admitMessage lets a requester send messages, one by one or in batches,
// unless its policy rule leaves agent.message out of
// allowed_capabilities.
func (n *Node) admitMessage(from requester, req *protocol.Request) error {
	if r := n.policy.Load().ruleFor(from); !r.allows(protocol.MessageCapability) {
		n.refused(metrics.RefusedPolicy)
		return protocol.Errorf(protocol.CodeUnauthorized, "policy %s does not allow agent %s to send messages", r.name, from)
	}
	return nil
}
