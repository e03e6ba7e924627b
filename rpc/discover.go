package rpc

import (
	"encoding/json"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// Method names of discovery. Package localapi serves mesh.discover.
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

// DiscoverQuery is a mesh.discover request as a server runs it.
type DiscoverQuery struct {
	// Query is the capability name, or the keyword when ByKeyword.
	Query     string
	ByKeyword bool
	// Filter is what the agents found must pass; nil for none.
	Filter *protocol.Filter
	// Timeout bounds the search: DefaultDiscoverTimeout unless asked,
	// at most MaxDiscoverTimeout.
	Timeout time.Duration
}

func discoverTimeoutError() error {
	return Errorf(CodeInvalidParams, `invalid params: "timeoutMs" must be a whole number of milliseconds from 1 to %d`, MaxDiscoverTimeout.Milliseconds())
}

// ParseDiscoverParams reads mesh.discover's params strictly (exactly one
// of "capability" and "keyword", an optional filter in either spelling, a
// timeoutMs from 1 to MaxDiscoverTimeout); anything else is -32602.
func ParseDiscoverParams(raw json.RawMessage) (DiscoverQuery, error) {
	var w discoverWire
	if err := discoverShape.decode(raw, &w); err != nil {
		return DiscoverQuery{}, err
	}
	capability, keyword := w.Capability, w.Keyword
	switch {
	case capability == "" && keyword == "":
		return DiscoverQuery{}, Errorf(CodeInvalidParams, `invalid params: "capability" or "keyword" is required`)
	case capability != "" && keyword != "":
		return DiscoverQuery{}, Errorf(CodeInvalidParams, `invalid params: give "capability" or "keyword", not both`)
	case len(capability) > protocol.MaxCapabilityNameLen || len(keyword) > protocol.MaxCapabilityNameLen:
		return DiscoverQuery{}, Errorf(CodeInvalidParams, "invalid params: query longer than %d bytes", protocol.MaxCapabilityNameLen)
	}
	filter, err := w.Filter.filter()
	if err != nil {
		return DiscoverQuery{}, err
	}
	req := DiscoverQuery{Query: capability, Filter: filter, Timeout: DefaultDiscoverTimeout}
	if w.TimeoutMS != nil {
		ms := *w.TimeoutMS
		if ms <= 0 || ms > MaxDiscoverTimeout.Milliseconds() {
			return DiscoverQuery{}, discoverTimeoutError()
		}
		req.Timeout = time.Duration(ms) * time.Millisecond
	}
	if keyword != "" {
		req.Query, req.ByKeyword = keyword, true
	}
	return req, nil
}
