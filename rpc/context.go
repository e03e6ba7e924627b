package rpc

import (
	"context"
	"encoding/json"

	"github.com/meshagent/meshagent/protocol"
)

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
