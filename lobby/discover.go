package lobby

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/meshagent/meshagent/protocol"
)

// DISCOVER_SERVICES bounds: at most MaxQueryKeywords query_keywords, each
// at most protocol.MaxCapabilityNameLen bytes; at most MaxMeshDiscovered
// mesh agents in one SERVICES_AVAILABLE (the first found).
const (
	MaxQueryKeywords  = 8
	MaxMeshDiscovered = 256
)

// Discoverer is implemented by a Mesh with a capability directory
// (*node.Node is one). A lobby whose Mesh is not a Discoverer answers
// DISCOVER_SERVICES with its own agents only.
type Discoverer interface {
	// Discover streams agents offering query (a capability name, or a
	// keyword if byKeyword), each with only its matching capabilities, as
	// they are confirmed. The channel closes when the search ends or ctx
	// is done.
	Discover(ctx context.Context, query string, byKeyword bool) (<-chan protocol.PeerInfo, error)
}

// discoverQuery is what a DISCOVER_SERVICES asks for: a capability name,
// keywords (seed 000 §4.3's query_keywords), or both.
type discoverQuery struct {
	name     string
	keywords []string // as sent, without duplicates
	folded   []string // keywords, lower-cased
}

// parseDiscoverQuery reads a DISCOVER_SERVICES payload. capability_name
// is a string; query_keywords an array of at most MaxQueryKeywords
// non-empty strings; at least one of the two is required. Anything else
// is INVALID_MESSAGE.
func parseDiscoverQuery(payload json.RawMessage) (*discoverQuery, *protocol.Error) {
	members, _ := objectMembers(payload) // checked by ParseMessage
	name, _, err := payloadString(members, "capability_name")
	if err != nil {
		return nil, protocol.AsError(err)
	}
	q := &discoverQuery{name: name}
	if name != "" {
		if err := (&protocol.Capability{Name: name}).Validate(); err != nil {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "%s payload: %s", TypeDiscoverServices, protocol.AsError(err).Message)
		}
	}
	for _, mb := range members {
		if mb.name != "query_keywords" || isNull(mb.raw) {
			continue
		}
		var raws []json.RawMessage
		if protocol.DecodeStrict(mb.raw, &raws) != nil {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, `%s payload: "query_keywords" must be an array of strings`, TypeDiscoverServices)
		}
		if len(raws) > MaxQueryKeywords {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, `%s payload: %d query_keywords, the limit is %d`, TypeDiscoverServices, len(raws), MaxQueryKeywords)
		}
		for i, raw := range raws {
			var kw string
			if len(raw) == 0 || raw[0] != '"' || protocol.DecodeStrict(raw, &kw) != nil {
				return nil, protocol.Errorf(protocol.CodeInvalidMessage, `%s payload: query_keywords[%d] must be a string`, TypeDiscoverServices, i)
			}
			kw = strings.TrimSpace(kw)
			switch {
			case kw == "" || len(kw) > protocol.MaxCapabilityNameLen:
				return nil, protocol.Errorf(protocol.CodeInvalidMessage, `%s payload: query_keywords[%d] must be 1 to %d bytes`, TypeDiscoverServices, i, protocol.MaxCapabilityNameLen)
			case strings.ContainsFunc(kw, unicode.IsControl):
				return nil, protocol.Errorf(protocol.CodeInvalidMessage, `%s payload: query_keywords[%d] must not contain control characters`, TypeDiscoverServices, i)
			}
			if f := strings.ToLower(kw); !slices.Contains(q.folded, f) {
				q.keywords, q.folded = append(q.keywords, kw), append(q.folded, f)
			}
		}
	}
	if q.name == "" && len(q.keywords) == 0 {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, `%s payload needs "capability_name" or "query_keywords"`, TypeDiscoverServices)
	}
	return q, nil
}

// matches reports whether a capability answers the query: its name is
// the capability_name, or a query keyword equals one of its keywords or
// occurs in its name or description, ignoring case.
func (q *discoverQuery) matches(c *protocol.Capability) bool {
	if q.name != "" && c.Name == q.name {
		return true
	}
	if len(q.folded) == 0 {
		return false
	}
	name, desc := strings.ToLower(c.Name), strings.ToLower(c.Description)
	for _, kw := range q.folded {
		if strings.Contains(name, kw) || strings.Contains(desc, kw) {
			return true
		}
		for _, k := range c.Keywords {
			if strings.ToLower(k) == kw {
				return true
			}
		}
	}
	return false
}

// discover serves DISCOVER_SERVICES.
func (l *Lobby) discover(c *conn, m *Message, agent string) {
	q, pe := parseDiscoverQuery(m.Payload)
	if pe != nil {
		l.sendError(c, m, pe)
		return
	}
	if !c.spawn(func() { l.discoverAndAnswer(c, m, agent, q) }) {
		l.sendError(c, m, busy(c))
	}
}

// discoverAndAnswer answers SERVICES_AVAILABLE: the connected lobby agents
// (other than the sender) with each capability that matches, sorted by
// agent id, then the mesh agents the directory finds, sorted by agent id.
func (l *Lobby) discoverAndAnswer(c *conn, m *Message, agent string, q *discoverQuery) {
	out := ServicesAvailablePayload{ServicesFound: []ServiceFound{}, DiscoveredForCapability: q.name, DiscoveredForKeywords: q.keywords}
	seen := map[string]bool{agent: true, l.cfg.ID: true, l.mesh.AgentID(): true}
	l.mu.Lock()
	for _, a := range l.agents {
		if seen[a.id] {
			continue
		}
		var relevant []protocol.Capability
		for i := range a.caps {
			if q.matches(&a.caps[i]) {
				relevant = append(relevant, cloneCapability(a.caps[i]))
			}
		}
		if len(relevant) > 0 {
			out.ServicesFound = append(out.ServicesFound, ServiceFound{AgentID: a.id, RelevantCapabilities: relevant})
		}
	}
	l.mu.Unlock()
	slices.SortFunc(out.ServicesFound, func(a, b ServiceFound) int { return cmp.Compare(a.AgentID, b.AgentID) })
	for _, s := range out.ServicesFound {
		seen[s.AgentID] = true
	}
	if d, ok := l.mesh.(Discoverer); ok {
		ctx, cancel := context.WithTimeout(c.ctx, l.cfg.DiscoverTimeout)
		for _, s := range l.discoverMesh(ctx, c, d, q) {
			if !seen[s.AgentID] {
				out.ServicesFound = append(out.ServicesFound, s)
			}
		}
		cancel()
	}
	b, err := marshal(out)
	if err != nil {
		l.sendError(c, m, protocol.Errorf(protocol.CodeInternalError, "encode SERVICES_AVAILABLE: %v", err))
		return
	}
	_ = c.sendMsg(&Message{SenderID: l.cfg.ID, ReceiverID: agent, MessageType: TypeServicesAvailable, Payload: b, ConversationID: m.ConversationID})
}

// discoverMesh asks the mesh directory for the query: the capability name,
// and each keyword (as sent and lower-cased: directory keys are exact),
// all at once until ctx ends. It returns the agents found (at most
// MaxMeshDiscovered), each with its matching capabilities, sorted by
// agent id. A failed search is logged
// and leaves the others' results.
func (l *Lobby) discoverMesh(ctx context.Context, c *conn, d Discoverer, q *discoverQuery) []ServiceFound {
	type search struct {
		query     string
		byKeyword bool
	}
	var searches []search
	if q.name != "" {
		searches = append(searches, search{q.name, false})
	}
	for i, kw := range q.keywords {
		searches = append(searches, search{kw, true})
		if q.folded[i] != kw {
			searches = append(searches, search{q.folded[i], true})
		}
	}
	var (
		mu    sync.Mutex
		found = map[string][]protocol.Capability{}
		wg    sync.WaitGroup
	)
	for _, s := range searches {
		wg.Go(func() {
			ch, err := d.Discover(ctx, s.query, s.byKeyword)
			if err != nil {
				c.log.Warn("mesh discovery failed; answering without it", "query", s.query, "keyword", s.byKeyword, "err", err)
				return
			}
			for pi := range ch {
				mu.Lock()
				caps, known := found[pi.AgentID]
				if !known && len(found) >= MaxMeshDiscovered {
					mu.Unlock()
					continue // drained until the search ends
				}
				if caps == nil {
					caps = []protocol.Capability{}
				}
				for _, cp := range pi.Capabilities {
					if !slices.ContainsFunc(caps, func(have protocol.Capability) bool { return have.Name == cp.Name }) {
						caps = append(caps, cp)
					}
				}
				found[pi.AgentID] = caps
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	out := make([]ServiceFound, 0, len(found))
	for id, caps := range found {
		out = append(out, ServiceFound{AgentID: id, RelevantCapabilities: caps})
	}
	slices.SortFunc(out, func(a, b ServiceFound) int { return cmp.Compare(a.AgentID, b.AgentID) })
	return out
}
