package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/protocol"
)

// contextMesh records what mesh.context* pass on and answers it back.
type contextMesh struct {
	fakemesh.Instant
	mu   sync.Mutex
	last []string // method, bead, value
}

func (m *contextMesh) answer(op, bead string, v json.RawMessage) (*protocol.BeadContext, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = []string{op, bead, string(v)}
	if bead == "refused" {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "bead %s refused", bead)
	}
	if v == nil {
		v = json.RawMessage(`{}`)
	}
	return &protocol.BeadContext{BeadID: bead, CollaboratingAgents: []string{fakemesh.SelfID}, SharedContext: v, Patches: 1}, nil
}

func (m *contextMesh) ContextGet(_ context.Context, bead string) (*protocol.BeadContext, error) {
	return m.answer("get", bead, nil)
}

func (m *contextMesh) ContextSet(_ context.Context, bead string, doc json.RawMessage, _ []string) (*protocol.BeadContext, error) {
	return m.answer("set", bead, doc)
}

func (m *contextMesh) ContextPatch(_ context.Context, bead string, patch json.RawMessage, _ []string) (*protocol.BeadContext, error) {
	return m.answer("patch", bead, patch)
}

// TestMeshContextParamsAreStrict: every mesh.context* call with a member
// of the wrong JSON type, an unknown or repeated member, or a missing one
// is -32602 naming it, and never reaches the mesh.
func TestMeshContextParamsAreStrict(t *testing.T) {
	mesh := &contextMesh{}
	fb := newFuzzServerOn(t, mesh)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, fb.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct{ method, params, want string }{
		{MethodMeshContextGet, `{"beadId":5}`, `"beadId" must be a string`},
		{MethodMeshContextGet, `{"bead":"b1"}`, `unknown field "bead"`},
		{MethodMeshContextGet, `{}`, `"beadId" is required`},
		{MethodMeshContextGet, `["b1"]`, `takes {"beadId"}`},
		{MethodMeshContextGet, `{"beadId":"b1","beadId":"b2"}`, `duplicate member "beadId"`},
		{MethodMeshContextSet, `{"beadId":"b1","context":[1]}`, `"context" must be an object`},
		{MethodMeshContextSet, `{"beadId":"b1","context":"x"}`, `"context" must be an object`},
		{MethodMeshContextSet, `{"beadId":"b1"}`, `"context" must be an object`},
		{MethodMeshContextSet, `{"beadId":"b1","context":null}`, `"context" must be an object`},
		{MethodMeshContextSet, `{"beadId":"b1","patch":{}}`, `unknown field "patch"`},
		{MethodMeshContextPatch, `{"beadId":"b1","patch":7}`, `"patch" must be an object`},
		{MethodMeshContextPatch, `{"beadId":["b1"],"patch":{}}`, `"beadId" must be a string`},
		{MethodMeshContextPatch, `{"BeadId":"b1","patch":{}}`, `unknown field "BeadId"`},
		{MethodMeshContextPatch, `{"beadId":"b1","patch":{"a":1,"a":2}}`, `duplicate member`},
		{MethodMeshContextPatch, `{"beadId":"b1","patch":{},"members":"a"}`, `"members"`},
		{MethodMeshContextSet, `{"beadId":"b1","context":{},"members":[1]}`, `"members`},
	} {
		var re *Error
		err := c.Call(ctx, tc.method, jsonRaw(tc.params), nil)
		if !errors.As(err, &re) || re.Code != CodeInvalidParams || !strings.Contains(re.Message, tc.want) {
			t.Errorf("%s %s: %v, want -32602 with %q", tc.method, tc.params, err, tc.want)
		}
	}
	mesh.mu.Lock()
	defer mesh.mu.Unlock()
	if mesh.last != nil {
		t.Fatalf("a refused call reached the mesh: %v", mesh.last)
	}
}

// TestMeshContextClient: the Go client's calls reach the mesh with the
// bead and value as given, answers decode, and the mesh's refusals come
// back as protocol errors; a mesh without bead contexts is -32601.
func TestMeshContextClient(t *testing.T) {
	mesh := &contextMesh{}
	fb := newFuzzServerOn(t, mesh)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, fb.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.ContextPatch(ctx, "bead-1", json.RawMessage(`{"a":{"b":null}}`), nil)
	if err != nil || got.BeadID != "bead-1" || string(got.SharedContext) != `{"a":{"b":null}}` {
		t.Fatalf("%v %+v", err, got)
	}
	if mesh.last[0] != "patch" || mesh.last[2] != `{"a":{"b":null}}` {
		t.Fatalf("mesh got %v", mesh.last)
	}
	if _, err := c.ContextSet(ctx, "bead-1", json.RawMessage(`{"x":1}`), nil); err != nil || mesh.last[0] != "set" {
		t.Fatalf("%v %v", err, mesh.last)
	}
	if got, err := c.ContextGet(ctx, "bead-1"); err != nil || mesh.last[0] != "get" || got.Patches != 1 {
		t.Fatalf("%v %v", err, mesh.last)
	}
	_, err = c.ContextGet(ctx, "refused")
	if pe := protocol.AsError(err); pe == nil || pe.Code != protocol.CodeInvalidMessage {
		t.Fatalf("refusal: %v, want INVALID_MESSAGE", err)
	}

	plain := newFuzzServer(t)
	c2, err := Dial(ctx, plain.url)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	var re *Error
	if _, err := c2.ContextGet(ctx, "bead-1"); !errors.As(err, &re) || re.Code != CodeMethodNotFound {
		t.Fatalf("mesh without contexts: %v, want -32601", err)
	}
}
