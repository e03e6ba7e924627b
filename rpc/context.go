package rpc

import (
	"context"
	"encoding/json"

	"github.com/meshagent/meshagent/protocol"
)

// BeadContexts is implemented by a Mesh that follows seed 004's shared
// bead contexts (*node.Node is one). A server whose mesh is not one
// answers mesh.context* with -32601.
type BeadContexts interface {
	ContextGet(ctx context.Context, beadID string) (*protocol.BeadContext, error)
	ContextSet(ctx context.Context, beadID string, doc json.RawMessage, members []string) (*protocol.BeadContext, error)
	ContextPatch(ctx context.Context, beadID string, patch json.RawMessage, members []string) (*protocol.BeadContext, error)
}

// The shared bead context methods (seed 004). Each answers the bead's
// context (protocol.BeadContext) as this node holds it.
const (
	// MethodMeshContextGet reads a bead's shared context:
	// {"beadId"}.
	MethodMeshContextGet = "mesh.contextGet"
	// MethodMeshContextSet replaces it: {"beadId","context":{...},
	// "members"?:[agent ids]}. Only a bead's members change it: the
	// first change makes its author a member with those it lists, and a
	// member's members replaces them (UNAUTHORIZED for a non-member).
	MethodMeshContextSet = "mesh.contextSet"
	// MethodMeshContextPatch applies an RFC 7396 merge patch to it:
	// {"beadId","patch":{...},"members"?:[agent ids]}.
	MethodMeshContextPatch = "mesh.contextPatch"
)

// ContextGetParams are the params of mesh.contextGet.
type ContextGetParams struct {
	BeadID string `json:"beadId"`
}

// ContextSetParams are the params of mesh.contextSet.
type ContextSetParams struct {
	BeadID  string          `json:"beadId"`
	Context json.RawMessage `json:"context"`
	// Members, when set, are the bead's members after the change.
	Members []string `json:"members,omitempty"`
}

// ContextPatchParams are the params of mesh.contextPatch.
type ContextPatchParams struct {
	BeadID string          `json:"beadId"`
	Patch  json.RawMessage `json:"patch"`
	// Members, when set, are the bead's members after the change.
	Members []string `json:"members,omitempty"`
}

func (s *Server) registerContextMethods() {
	s.Handle(MethodMeshContextGet, s.meshContext)
	s.Handle(MethodMeshContextSet, s.meshContext)
	s.Handle(MethodMeshContextPatch, s.meshContext)
}

// meshContext decodes the params strictly first (so that a malformed
// call is -32602 on any server), then asks the mesh.
func (s *Server) meshContext(ctx context.Context, r *Request) (any, error) {
	var (
		bead, member string
		raw          json.RawMessage
		members      []string
		get          ContextGetParams
		set          ContextSetParams
		patch        ContextPatchParams
		usage        string
		target       any
	)
	switch r.Method {
	case MethodMeshContextGet:
		target, usage = &get, `{"beadId"}`
	case MethodMeshContextSet:
		target, usage, member = &set, `{"beadId", "context": {...}, "members"?: [...]}`, "context"
	default:
		target, usage, member = &patch, `{"beadId", "patch": {...}, "members"?: [...]}`, "patch"
	}
	if len(r.Params) == 0 || r.Params[0] != '{' {
		return nil, Errorf(CodeInvalidParams, "invalid params: %s takes %s", r.Method, usage)
	}
	if err := decodeStrict(r.Params, target); err != nil {
		return nil, Errorf(CodeInvalidParams, "invalid params: %s: %v (it takes %s)", r.Method, err, usage)
	}
	switch r.Method {
	case MethodMeshContextGet:
		bead = get.BeadID
	case MethodMeshContextSet:
		bead, raw, members = set.BeadID, set.Context, set.Members
	default:
		bead, raw, members = patch.BeadID, patch.Patch, patch.Members
	}
	if bead == "" {
		return nil, Errorf(CodeInvalidParams, `invalid params: %s: "beadId" is required (it takes %s)`, r.Method, usage)
	}
	if member != "" && (len(raw) == 0 || raw[0] != '{') {
		return nil, Errorf(CodeInvalidParams, `invalid params: %s: %q must be an object (it takes %s)`, r.Method, member, usage)
	}
	c, ok := s.mesh.(BeadContexts)
	if !ok {
		return nil, Errorf(CodeMethodNotFound, "method not found: %s (this node keeps no bead contexts)", r.Method)
	}
	var (
		res *protocol.BeadContext
		err error
	)
	switch r.Method {
	case MethodMeshContextGet:
		res, err = c.ContextGet(ctx, bead)
	case MethodMeshContextSet:
		res, err = c.ContextSet(ctx, bead, raw, members)
	default:
		res, err = c.ContextPatch(ctx, bead, raw, members)
	}
	if err != nil {
		return nil, protocol.AsError(err)
	}
	return res, nil
}

// ContextGet runs mesh.contextGet.
func (c *Client) ContextGet(ctx context.Context, beadID string) (*protocol.BeadContext, error) {
	return c.contextCall(ctx, MethodMeshContextGet, ContextGetParams{BeadID: beadID})
}

// ContextSet runs mesh.contextSet; members, when not nil, are the
// bead's members after the change.
func (c *Client) ContextSet(ctx context.Context, beadID string, doc json.RawMessage, members []string) (*protocol.BeadContext, error) {
	return c.contextCall(ctx, MethodMeshContextSet, ContextSetParams{BeadID: beadID, Context: doc, Members: members})
}

// ContextPatch runs mesh.contextPatch; members, when not nil, are the
// bead's members after the change.
func (c *Client) ContextPatch(ctx context.Context, beadID string, patch json.RawMessage, members []string) (*protocol.BeadContext, error) {
	return c.contextCall(ctx, MethodMeshContextPatch, ContextPatchParams{BeadID: beadID, Patch: patch, Members: members})
}

func (c *Client) contextCall(ctx context.Context, method string, params any) (*protocol.BeadContext, error) {
	var res protocol.BeadContext
	if err := c.Call(ctx, method, params, &res); err != nil {
		if pe := ProtocolError(err); pe != nil {
			return nil, pe
		}
		return nil, err
	}
	return &res, nil
}
