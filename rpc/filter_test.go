package rpc_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// The seed 004 filter at the local API: mesh.publish and mesh.discover
// read it in protocol.Filter's camelCase and in seed 004's snake_case,
// one member in one spelling only, strictly.

// filterMesh is discoveringMesh whose peer table knows A1 (persona qa,
// translate and summarize) and A2 (persona dev, translate only): the
// search lists only the matching capability, the filter checks them all.
type filterMesh struct{ discoveringMesh }

func (filterMesh) Peers() []protocol.PeerInfo {
	return []protocol.PeerInfo{
		{AgentID: "A1", PersonaType: "qa", Capabilities: []protocol.Capability{{Name: "translate"}, {Name: "summarize"}}},
		{AgentID: "A2", PersonaType: "dev", Capabilities: []protocol.Capability{{Name: "translate"}}},
	}
}

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
// type, and an unknown member are -32602, for both methods.
func TestFilterRefused(t *testing.T) {
	pub := dialClient(t, topicServer(t, newTopicMesh()))
	disc := dialClient(t, filterServer(t))
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
		for _, call := range []struct {
			c      *rpc.Client
			method string
			params string
		}{
			{pub, rpc.MethodMeshPublish, `{"topic":"news:1","payload":{},"filter":` + tc.filter + `}`},
			{disc, rpc.MethodMeshDiscover, `{"capability":"translate","filter":` + tc.filter + `}`},
		} {
			err := call.c.Call(ctxT(t), call.method, json.RawMessage(call.params), nil)
			var re *rpc.Error
			if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, tc.want) {
				t.Errorf("%s %s: %v, want -32602 with %q", call.method, tc.filter, err, tc.want)
			}
		}
	}
}

func filterServer(t *testing.T) string {
	t.Helper()
	return rpctest.Start(t, filterMesh{discoveringMesh{fakemesh.New()}}).URL
}

// TestDiscoverFilter: the agents found pass mesh.discover's filter,
// judged on what the node knows of them, in either spelling.
func TestDiscoverFilter(t *testing.T) {
	c := dialClient(t, filterServer(t))
	for _, tc := range []struct {
		filter string
		want   []string
	}{
		{`{}`, []string{"A1", "A2"}},
		{`{"personaTypes":["qa"]}`, []string{"A1"}},
		{`{"persona_types":["dev"]}`, []string{"A2"}},
		{`{"exclude_agents":["A1"]}`, []string{"A2"}},
		{`{"includeAgents":["A1"]}`, []string{"A1"}},
		{`{"required_capabilities":["summarize"]}`, []string{"A1"}},
		{`{"capabilities":["summarize"],"persona_types":["dev"]}`, nil},
	} {
		var res rpc.ServicesAvailable
		params := json.RawMessage(`{"capability":"translate","filter":` + tc.filter + `}`)
		if err := c.Call(ctxT(t), rpc.MethodMeshDiscover, params, &res); err != nil {
			t.Fatalf("%s: %v", tc.filter, err)
		}
		var got []string
		for _, s := range res.ServicesFound {
			got = append(got, s.AgentID)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("filter %s found %q, want %q", tc.filter, got, tc.want)
		}
	}
}
