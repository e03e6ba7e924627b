package localapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// Discover is the fake node's directory: "translate" is offered by two
// agents, keyword "language" by one; "broken" fails; anything else finds
// nobody.
func (*fakeNode) Discover(ctx context.Context, query string, byKeyword bool) (<-chan protocol.PeerInfo, error) {
	if query == "broken" {
		return nil, protocol.Errorf(protocol.CodeInternalError, "directory unavailable")
	}
	var found []protocol.PeerInfo
	switch {
	case query == "translate" && !byKeyword:
		found = []protocol.PeerInfo{
			{AgentID: "A1", Capabilities: []protocol.Capability{{Name: "translate", Description: "en-de"}}},
			{AgentID: "A2", Capabilities: []protocol.Capability{{Name: "translate"}}},
		}
	case query == "language" && byKeyword:
		found = []protocol.PeerInfo{{AgentID: "A3", Capabilities: []protocol.Capability{{Name: "fr", Keywords: []string{"language"}}}}}
	}
	ch := make(chan protocol.PeerInfo)
	go func() {
		defer close(ch)
		for _, pi := range found {
			select {
			case ch <- pi:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch, nil
}

// Peers is the fake node's peer table: A1 (persona qa, translate and
// summarize) and A2 (persona dev, translate only). A search lists only
// the matching capability; mesh.discover's filter checks them all.
func (*fakeNode) Peers() []protocol.PeerInfo {
	return []protocol.PeerInfo{
		{AgentID: "A1", PersonaType: "qa", Capabilities: []protocol.Capability{{Name: "translate"}, {Name: "summarize"}}},
		{AgentID: "A2", PersonaType: "dev", Capabilities: []protocol.Capability{{Name: "translate"}}},
	}
}

// TestDiscover: the agents found stream as mesh.discovered before the
// result, which lists them all; a search that finds nobody is an empty
// list; the directory's error is the client's.
func TestDiscover(t *testing.T) {
	c := rpctest.DialClient(t, serveMethods(t, newFakeNode()))
	var streamed []string
	res, err := c.Discover(ctxT(t), "translate", false, 0, func(pi protocol.PeerInfo) { streamed = append(streamed, pi.AgentID) })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(streamed, ",") != "A1,A2" {
		t.Errorf("streamed %v, want A1,A2 before the result", streamed)
	}
	if res.DiscoveredForCapability != "translate" || len(res.ServicesFound) != 2 ||
		res.ServicesFound[0].AgentID != "A1" || res.ServicesFound[0].RelevantCapabilities[0].Description != "en-de" {
		t.Errorf("result %+v", res)
	}
	res, err = c.Discover(ctxT(t), "language", true, 0, nil)
	if err != nil || len(res.ServicesFound) != 1 || res.ServicesFound[0].AgentID != "A3" {
		t.Fatalf("by keyword: %+v %v", res, err)
	}
	res, err = c.Discover(ctxT(t), "nothing", false, 0, nil)
	if err != nil || res.ServicesFound == nil || len(res.ServicesFound) != 0 {
		t.Fatalf("no providers must be an empty list: %+v %v", res, err)
	}
	_, err = c.Discover(ctxT(t), "broken", false, 0, nil)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeInternalError {
		t.Fatalf("directory error: %v", err)
	}
}

// TestDiscoverParams: params are read strictly, -32602 naming what is
// wrong; a server without Register is -32601.
func TestDiscoverParams(t *testing.T) {
	c := rpctest.DialClient(t, serveMethods(t, newFakeNode()))
	for _, tc := range []struct{ params, want string }{
		{`{}`, `"capability" or "keyword" is required`},
		{`{"capability":"a","keyword":"b"}`, `not both`},
		{`{"capability":5}`, `must be a string`},
		{`{"capability":"a","extra":1}`, `unknown field`},
		{`{"capability":"a","timeoutMs":-1}`, `timeoutMs`},
		{`[1]`, `takes an object`},
		{`{"keyword":["a"]}`, `"keyword" must be a string`},
		{`{"capability":"x","timeoutMs":1.5}`, `"timeoutMs"`},
		{`{"capability":"x","timeoutMs":"100"}`, `"timeoutMs"`},
	} {
		err := c.Call(ctxT(t), rpc.MethodMeshDiscover, json.RawMessage(tc.params), nil)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, tc.want) {
			t.Errorf("params %s: got %v, want -32602 mentioning %q", tc.params, err, tc.want)
		}
	}
	if _, err := plainClient(t).Discover(ctxT(t), "x", false, 0, nil); rpcCode(err) != rpc.CodeMethodNotFound {
		t.Fatalf("mesh.discover without Register: %v, want -32601", err)
	}
}

// TestDiscoverFilter: the agents found pass mesh.discover's filter,
// judged on what the node knows of them, in either spelling.
func TestDiscoverFilter(t *testing.T) {
	c := rpctest.DialClient(t, serveMethods(t, newFakeNode()))
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

// TestDiscoverFilterRefused: both spellings of one member, a member of
// the wrong type, and an unknown member are -32602 (rpc's
// TestFilterRefused checks mesh.publish alike).
func TestDiscoverFilterRefused(t *testing.T) {
	c := rpctest.DialClient(t, serveMethods(t, newFakeNode()))
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
		err := c.Call(ctxT(t), rpc.MethodMeshDiscover, json.RawMessage(`{"capability":"translate","filter":`+tc.filter+`}`), nil)
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, tc.want) {
			t.Errorf("mesh.discover %s: %v, want -32602 with %q", tc.filter, err, tc.want)
		}
	}
}
