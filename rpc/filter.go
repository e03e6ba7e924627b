package rpc

import (
	"github.com/meshagent/meshagent/protocol"
)

// filterWire is a seed 004 broadcast filter as the local API reads it
// (mesh.publish's and mesh.discover's "filter"): each member in the
// camelCase of protocol.Filter, or in seed 004's snake_case, where
// "required_capabilities" is "capabilities". One member given in both
// spellings is refused; the filter sent on the mesh is always
// protocol.Filter's.
type filterWire struct {
	IncludeAgents        []string `json:"includeAgents"`
	IncludeAgentsSnake   []string `json:"include_agents"`
	ExcludeAgents        []string `json:"excludeAgents"`
	ExcludeAgentsSnake   []string `json:"exclude_agents"`
	PersonaTypes         []string `json:"personaTypes"`
	PersonaTypesSnake    []string `json:"persona_types"`
	Capabilities         []string `json:"capabilities"`
	RequiredCapabilities []string `json:"required_capabilities"`
}

// filterError words a "filter" that is not an object of string arrays.
func filterError() error {
	return Errorf(CodeInvalidParams, `invalid params: "filter" must be an object {"includeAgents", "excludeAgents", "personaTypes", "capabilities"} of string arrays`+
		` (or seed 004's "include_agents", "exclude_agents", "persona_types", "required_capabilities")`)
}

// filter returns the filter the wire form spells, nil for none, or the
// error to answer when a member is given in both spellings.
func (w *filterWire) filter() (*protocol.Filter, error) {
	if w == nil {
		return nil, nil
	}
	f := &protocol.Filter{}
	for _, m := range []struct {
		camel, snake string
		a, b         []string
		to           *[]string
	}{
		{"includeAgents", "include_agents", w.IncludeAgents, w.IncludeAgentsSnake, &f.IncludeAgents},
		{"excludeAgents", "exclude_agents", w.ExcludeAgents, w.ExcludeAgentsSnake, &f.ExcludeAgents},
		{"personaTypes", "persona_types", w.PersonaTypes, w.PersonaTypesSnake, &f.PersonaTypes},
		{"capabilities", "required_capabilities", w.Capabilities, w.RequiredCapabilities, &f.Capabilities},
	} {
		if m.a != nil && m.b != nil {
			return nil, Errorf(CodeInvalidParams, `invalid params: "filter" gives %q and %q, one member in two spellings: give one`, m.camel, m.snake)
		}
		*m.to = m.a
		if m.b != nil {
			*m.to = m.b
		}
	}
	return f, nil
}
