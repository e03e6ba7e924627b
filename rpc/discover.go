package rpc

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// Discoverer is implemented by a Mesh with a capability directory
// (*node.Node is one). A server whose mesh is not a Discoverer answers
// mesh.discover with -32601.
type Discoverer interface {
	// Discover streams agents offering query (a capability name, or a
	// keyword if byKeyword), each with only its matching capabilities, as
	// they are confirmed. The channel closes when the search ends or ctx
	// is done.
	Discover(ctx context.Context, query string, byKeyword bool) (<-chan protocol.PeerInfo, error)
}

// Method names of discovery.
const (
	MethodMeshDiscover   = "mesh.discover"
	MethodMeshDiscovered = "mesh.discovered"
)

// Discovery bounds: a search runs until the directory has no more to say
// or its timeout passes.
const (
	DefaultDiscoverTimeout = 10 * time.Second
	MaxDiscoverTimeout     = 5 * time.Minute
)

// DiscoverParams are the params of mesh.discover: exactly one of
// Capability and Keyword.
type DiscoverParams struct {
	Capability string `json:"capability,omitempty"`
	Keyword    string `json:"keyword,omitempty"`
	TimeoutMS  int64  `json:"timeoutMs,omitempty"`
}

// ServiceFound is one entry of seed 000's SERVICES_AVAILABLE.
type ServiceFound struct {
	AgentID              string                `json:"agent_id"`
	RelevantCapabilities []protocol.Capability `json:"relevant_capabilities"`
}

// ServicesAvailable is the result of mesh.discover, in seed 000's
// SERVICES_AVAILABLE payload shape.
type ServicesAvailable struct {
	ServicesFound           []ServiceFound `json:"services_found"`
	DiscoveredForCapability string         `json:"discovered_for_capability"`
	// DiscoveredForKeywords echoes a lobby DISCOVER_SERVICES's
	// query_keywords (meshagent's addition, absent when there were none).
	DiscoveredForKeywords []string `json:"discovered_for_keywords,omitempty"`
}

// DiscoveredParams are the params of a mesh.discovered notification, sent
// for each agent as soon as it is confirmed, before the final result.
type DiscoveredParams struct {
	RequestID json.RawMessage   `json:"requestId"`
	Agent     protocol.PeerInfo `json:"agent"`
}

var discoverFields = map[string]bool{"capability": true, "keyword": true, "timeoutMs": true}

func parseDiscoverParams(raw json.RawMessage) (query string, byKeyword bool, timeout time.Duration, err error) {
	var w map[string]json.RawMessage
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &w) != nil {
		return "", false, 0, Errorf(CodeInvalidParams, `invalid params: mesh.discover takes an object {"capability" or "keyword", "timeoutMs"}`)
	}
	for _, k := range slices.Sorted(maps.Keys(w)) {
		if !discoverFields[k] {
			return "", false, 0, Errorf(CodeInvalidParams, `invalid params: unknown field %q (mesh.discover takes capability, keyword, timeoutMs)`, k)
		}
	}
	capability, err := stringField("capability", w["capability"])
	if err != nil {
		return "", false, 0, err
	}
	keyword, err := stringField("keyword", w["keyword"])
	if err != nil {
		return "", false, 0, err
	}
	switch {
	case capability == "" && keyword == "":
		return "", false, 0, Errorf(CodeInvalidParams, `invalid params: "capability" or "keyword" is required`)
	case capability != "" && keyword != "":
		return "", false, 0, Errorf(CodeInvalidParams, `invalid params: give "capability" or "keyword", not both`)
	case len(capability) > protocol.MaxCapabilityNameLen || len(keyword) > protocol.MaxCapabilityNameLen:
		return "", false, 0, Errorf(CodeInvalidParams, "invalid params: query longer than %d bytes", protocol.MaxCapabilityNameLen)
	}
	timeout = DefaultDiscoverTimeout
	if t := w["timeoutMs"]; len(t) > 0 && !isNull(t) {
		var n json.Number
		if unmarshalNumber(t, &n) != nil {
			return "", false, 0, Errorf(CodeInvalidParams, `invalid params: "timeoutMs" must be a number of milliseconds`)
		}
		ms, err := n.Int64()
		if err != nil || ms <= 0 || ms > MaxDiscoverTimeout.Milliseconds() {
			return "", false, 0, Errorf(CodeInvalidParams, `invalid params: "timeoutMs" must be a whole number of milliseconds from 1 to %d`, MaxDiscoverTimeout.Milliseconds())
		}
		timeout = time.Duration(ms) * time.Millisecond
	}
	if keyword != "" {
		return keyword, true, timeout, nil
	}
	return capability, false, timeout, nil
}

// meshDiscover serves mesh.discover: each agent is sent as a
// mesh.discovered notification as soon as it is confirmed, and the result
// lists them all in seed 000's SERVICES_AVAILABLE shape.
func (s *Server) meshDiscover(ctx context.Context, r *Request) (any, error) {
	d, ok := s.mesh.(Discoverer)
	if !ok {
		return nil, Errorf(CodeMethodNotFound, "method not found: %s (this node has no capability directory)", r.Method)
	}
	query, byKeyword, timeout, err := parseDiscoverParams(r.Params)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	found, err := d.Discover(ctx, query, byKeyword)
	if err != nil {
		return nil, protocol.AsError(err)
	}
	out := ServicesAvailable{ServicesFound: []ServiceFound{}, DiscoveredForCapability: query}
	for pi := range found {
		if !r.IsNotification() {
			_ = r.Conn.Notify(MethodMeshDiscovered, DiscoveredParams{RequestID: r.ID, Agent: pi})
		}
		caps := pi.Capabilities
		if caps == nil {
			caps = []protocol.Capability{}
		}
		out.ServicesFound = append(out.ServicesFound, ServiceFound{AgentID: pi.AgentID, RelevantCapabilities: caps})
	}
	return out, nil
}
