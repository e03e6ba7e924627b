package rpc_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/protocol"
)

// discoveringMesh adds a directory to the fake mesh: "translate" is offered
// by two agents, keyword "language" by one; anything else finds nobody.
type discoveringMesh struct{ *fakemesh.Mesh }

func (discoveringMesh) Discover(ctx context.Context, query string, byKeyword bool) (<-chan protocol.PeerInfo, error) {
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

func discoverServer(t *testing.T) string {
	t.Helper()
	return rpctest.Start(t, discoveringMesh{fakemesh.New()}).URL
}

func TestDiscover(t *testing.T) {
	c := dialClient(t, discoverServer(t))
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

func TestDiscoverParams(t *testing.T) {
	ws := dialRaw(t, discoverServer(t))
	for _, tc := range []struct{ params, want string }{
		{`{}`, `"capability\" or \"keyword\" is required`},
		{`{"capability":"a","keyword":"b"}`, `not both`},
		{`{"capability":5}`, `must be a string`},
		{`{"capability":"a","extra":1}`, `unknown field`},
		{`{"capability":"a","timeoutMs":-1}`, `timeoutMs`},
		{`[1]`, `takes an object`},
	} {
		writeFrame(t, ws, `{"jsonrpc":"2.0","id":1,"method":"mesh.discover","params":`+tc.params+`}`)
		got := readFrame(t, ws)
		if !strings.Contains(got, `-32602`) || !strings.Contains(got, tc.want) {
			t.Errorf("params %s: got %s, want -32602 mentioning %q", tc.params, got, tc.want)
		}
	}
}

func TestDiscoverWithoutDirectory(t *testing.T) {
	ts := newTestServer(t)
	ws := dialRaw(t, ts.url)
	writeFrame(t, ws, `{"jsonrpc":"2.0","id":1,"method":"mesh.discover","params":{"capability":"x"}}`)
	if got := readFrame(t, ws); !strings.Contains(got, `-32601`) {
		t.Fatalf("got %s, want -32601", got)
	}
}
