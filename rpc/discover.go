package rpc

import (
	"context"
	"encoding/json"
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
// Capability and Keyword, and optionally a seed 004 filter the agents
// found must pass (the server also reads its members in snake_case: see
// filterWire).
type DiscoverParams struct {
	Capability string           `json:"capability,omitempty"`
	Keyword    string           `json:"keyword,omitempty"`
	Filter     *protocol.Filter `json:"filter,omitempty"`
	TimeoutMS  int64            `json:"timeoutMs,omitempty"`
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

// discoverWire is what mesh.discover reads: DiscoverParams, with
// timeoutMs a pointer because an explicit 0 is an error where absence is
// the default.
type discoverWire struct {
	DiscoverParams
	Filter    *filterWire `json:"filter"`
	TimeoutMS *int64      `json:"timeoutMs"`
}

// discoverShape words mesh.discover's params errors.
var discoverShape = paramShape{
	method: MethodMeshDiscover,
	object: `mesh.discover takes an object {"capability" or "keyword", "filter", "timeoutMs"}`,
	takes:  "capability, filter, keyword, timeoutMs",
	member: func(fe *protocol.FieldError) error {
		if under(fe, "filter") {
			return filterError()
		}
		return timeoutMember(discoverTimeoutError)(fe)
	},
}

// discoverRequest is a mesh.discover request as the server runs it.
type discoverRequest struct {
	query     string
	byKeyword bool
	filter    *protocol.Filter
	timeout   time.Duration
}

func discoverTimeoutError() error {
	return Errorf(CodeInvalidParams, `invalid params: "timeoutMs" must be a whole number of milliseconds from 1 to %d`, MaxDiscoverTimeout.Milliseconds())
}

func parseDiscoverParams(raw json.RawMessage) (discoverRequest, error) {
	var w discoverWire
	if err := discoverShape.decode(raw, &w); err != nil {
		return discoverRequest{}, err
	}
	capability, keyword := w.Capability, w.Keyword
	switch {
	case capability == "" && keyword == "":
		return discoverRequest{}, Errorf(CodeInvalidParams, `invalid params: "capability" or "keyword" is required`)
	case capability != "" && keyword != "":
		return discoverRequest{}, Errorf(CodeInvalidParams, `invalid params: give "capability" or "keyword", not both`)
	case len(capability) > protocol.MaxCapabilityNameLen || len(keyword) > protocol.MaxCapabilityNameLen:
		return discoverRequest{}, Errorf(CodeInvalidParams, "invalid params: query longer than %d bytes", protocol.MaxCapabilityNameLen)
	}
	filter, err := w.Filter.filter()
	if err != nil {
		return discoverRequest{}, err
	}
	req := discoverRequest{query: capability, filter: filter, timeout: DefaultDiscoverTimeout}
	if w.TimeoutMS != nil {
		ms := *w.TimeoutMS
		if ms <= 0 || ms > MaxDiscoverTimeout.Milliseconds() {
			return discoverRequest{}, discoverTimeoutError()
		}
		req.timeout = time.Duration(ms) * time.Millisecond
	}
	if keyword != "" {
		req.query, req.byKeyword = keyword, true
	}
	return req, nil
}

// meshDiscover serves mesh.discover: each agent the filter admits is sent
// as a mesh.discovered notification as soon as it is confirmed, and the
// result lists them all in seed 000's SERVICES_AVAILABLE shape.
func (s *Server) meshDiscover(ctx context.Context, r *Request) (any, error) {
	d, ok := s.mesh.(Discoverer)
	if !ok {
		return nil, Errorf(CodeMethodNotFound, "method not found: %s (this node has no capability directory)", r.Method)
	}
	req, err := parseDiscoverParams(r.Params)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, req.timeout)
	defer cancel()
	found, err := d.Discover(ctx, req.query, req.byKeyword)
	if err != nil {
		return nil, protocol.AsError(err)
	}
	out := ServicesAvailable{ServicesFound: []ServiceFound{}, DiscoveredForCapability: req.query}
	for pi := range found {
		if req.filter != nil && !admits(req.filter, pi, s.mesh.Peers()) {
			continue
		}
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
