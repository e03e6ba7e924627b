package node

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
)

// Service is a capability this agent offers and the handler that runs it.
type Service struct {
	Capability protocol.Capability
	Handler    Handler
}

// Call is one verified request handed to a handler. The node has already
// checked the signature, the ACL, the input schema and the limits.
type Call struct {
	// From is the verified requester: the agent that signed the request.
	From peer.ID
	// OnBehalfOf is the client From vouches for in the signed request
	// (protocol.MetaOnBehalfOf), "" when From asks for itself: a relay
	// calling for its lobby agent alice vouches "lobby:alice". The ACL and
	// the policy have already matched it as "<From>/<OnBehalfOf>".
	OnBehalfOf string
	// Request is the decoded request payload.
	Request *protocol.Request
	// Progress sends an in_progress response carrying result to the
	// caller. It may be called any number of times before the handler
	// returns, and returns an error once the caller is gone.
	Progress func(result json.RawMessage) error

	task *task // nil for requests without a task (calls to self, built-ins)
}

// Requester is who the request is from, as authorized_requester_ids and
// policy entries name it: From, or "<From>/<OnBehalfOf>" for a client From
// vouches for.
func (c *Call) Requester() string {
	return requester{agent: c.From, client: c.OnBehalfOf}.String()
}

// TaskID is the id by which the requester knows the call's task (task
// status, task wait, task resolve): the id its provider chose for a task
// on disk (a detached one), else the request's correlation id.
func (c *Call) TaskID() string {
	if c.task == nil {
		return c.Request.CorrelationID
	}
	c.task.mu.Lock()
	defer c.task.mu.Unlock()
	return c.task.t.ID
}

// SetState lets a handler mark its request's task (ESCALATED, say, with a
// note). Final states are set by the node when the handler returns.
// ESCALATED is Escalate with note as the reason (its error is logged).
func (c *Call) SetState(s protocol.TaskState, note string) {
	if c.task == nil || s.Final() {
		return
	}
	if s == protocol.TaskEscalated {
		if err := c.task.escalate(note); err != nil {
			c.task.tt.log.Warn("task not escalated", "task", c.task.key.id, "err", err)
		}
		return
	}
	c.task.set(s, note)
}

// Handler runs a capability. Handle returns the result (a JSON value) or an
// error; a *protocol.Error keeps its code, anything else is reported as
// INTERNAL_ERROR. ctx is cancelled when the caller's timeout passes or the
// node closes. Handlers run concurrently and must be safe for that. The
// result is the node's once Handle returns: the node may send and keep
// those very bytes, so a handler must not change them afterwards.
type Handler interface {
	Handle(ctx context.Context, call *Call) (json.RawMessage, error)
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, call *Call) (json.RawMessage, error)

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, call *Call) (json.RawMessage, error) {
	return f(ctx, call)
}

// EchoHandler returns the built-in echo handler: the result is the params
// (or {} when there are none). It is meant for demos and tests.
func EchoHandler() Handler {
	return HandlerFunc(func(_ context.Context, call *Call) (json.RawMessage, error) {
		if len(call.Request.Params) == 0 || string(call.Request.Params) == "null" {
			return json.RawMessage("{}"), nil
		}
		return call.Request.Params, nil
	})
}

// service is a registered Service with its schemas compiled, or one of
// the node's own capabilities (builtins.go).
type service struct {
	Service
	in, out *protocol.Schema
	// acl is authorized_requester_ids, parsed; empty means public.
	acl *acl
	// admit, when set, replaces the ACL and policy checks: the node's own
	// capabilities decide for themselves who may call them.
	admit func(from requester, req *protocol.Request) error
	// task is whether a request runs as a task in the provider's task
	// table (so that it runs once): true for every registered service;
	// the built-ins read that table or deduplicate on their own.
	task bool
}

func compileService(s Service) (*service, error) {
	if err := s.Capability.Validate(); err != nil {
		return nil, err
	}
	if s.Handler == nil {
		return nil, fmt.Errorf("capability %q has no handler", s.Capability.Name)
	}
	in, err := protocol.CompileSchema(s.Capability.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("capability %q input_schema: %w", s.Capability.Name, err)
	}
	out, err := protocol.CompileSchema(s.Capability.OutputSchema)
	if err != nil {
		return nil, fmt.Errorf("capability %q output_schema: %w", s.Capability.Name, err)
	}
	// Normalise the ACL to peer IDs: a file may list either form of an
	// agent id, and "<agent id>/<client>" for an agent's clients.
	a, err := compileACL(s.Capability.AuthorizedRequesterIDs)
	if err != nil {
		return nil, fmt.Errorf("capability %q: authorized_requester_ids: %w", s.Capability.Name, err)
	}
	return &service{Service: s, in: in, out: out, acl: a, task: true}, nil
}

func validateServices(ss []Service) error {
	seen := make(map[string]bool, len(ss))
	for _, s := range ss {
		if seen[s.Capability.Name] {
			return fmt.Errorf("node: capability %q declared twice", s.Capability.Name)
		}
		seen[s.Capability.Name] = true
		if _, err := compileService(s); err != nil {
			return fmt.Errorf("node: %w", err)
		}
	}
	return nil
}
