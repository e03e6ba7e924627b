package rpc_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// The seed 004 filter at the local API: mesh.publish reads it in
// protocol.Filter's camelCase and in seed 004's snake_case, one member in
// one spelling only, strictly (localapi tests mesh.discover's alike).

func TestPublishFilterSpellings(t *testing.T) {
	mesh := newTopicMesh()
	c := dialClient(t, topicServer(t, mesh))
	if err := c.Call(ctxT(t), rpc.MethodMeshSubscribe, map[string]any{"pattern": "news:*"}, nil); err != nil {
		t.Fatal(err)
	}
	want := &protocol.Filter{IncludeAgents: []string{"a"}, ExcludeAgents: []string{"b"}, PersonaTypes: []string{"qa"}, Capabilities: []string{"run_tests"}}
	for _, filter := range []string{
		`{"includeAgents":["a"],"excludeAgents":["b"],"personaTypes":["qa"],"capabilities":["run_tests"]}`,
		`{"include_agents":["a"],"exclude_agents":["b"],"persona_types":["qa"],"required_capabilities":["run_tests"]}`,
		`{"include_agents":["a"],"excludeAgents":["b"],"persona_types":["qa"],"capabilities":["run_tests"]}`,
	} {
		params := json.RawMessage(`{"topic":"news:1","payload":{},"filter":` + filter + `}`)
		if err := c.Call(ctxT(t), rpc.MethodMeshPublish, params, nil); err != nil {
			t.Fatalf("%s: %v", filter, err)
		}
		mesh.mu.Lock()
		got := mesh.filters[len(mesh.filters)-1]
		mesh.mu.Unlock()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s reached the mesh as %+v, want %+v", filter, got, want)
		}
	}
}

// TestFilterRefused: both spellings of one member, a member of the wrong
// type, and an unknown member are -32602.
func TestFilterRefused(t *testing.T) {
	pub := dialClient(t, topicServer(t, newTopicMesh()))
	for _, tc := range []struct{ filter, want string }{
		{`{"persona_types":["qa"],"personaTypes":["qa"]}`, `"personaTypes" and "persona_types"`},
		{`{"include_agents":["a"],"includeAgents":[]}`, `"includeAgents" and "include_agents"`},
		{`{"exclude_agents":[],"excludeAgents":["b"]}`, `"excludeAgents" and "exclude_agents"`},
		{`{"required_capabilities":["x"],"capabilities":["x"]}`, `"capabilities" and "required_capabilities"`},
		{`{"persona_types":"qa"}`, `"filter" must be an object`},
		{`{"required_capabilities":[1]}`, `"filter" must be an object`},
		{`{"exclude_agents":{"a":1}}`, `"filter" must be an object`},
		{`{"personas":["qa"]}`, `"filter" must be an object`},
		{`{"Persona_Types":["qa"]}`, `"filter" must be an object`},
		{`["qa"]`, `"filter" must be an object`},
	} {
		err := pub.Call(ctxT(t), rpc.MethodMeshPublish, json.RawMessage(`{"topic":"news:1","payload":{},"filter":`+tc.filter+`}`), nil)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, tc.want) {
			t.Errorf("%s %s: %v, want -32602 with %q", rpc.MethodMeshPublish, tc.filter, err, tc.want)
		}
	}
}
