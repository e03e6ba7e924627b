package pubsub

import (
	"encoding/json"
	"path"
	"slices"

	"github.com/meshagent/meshagent/protocol"
)

// Filter is a seed 004 broadcast filter, carried in envelope metadata
// under "filter". Empty lists do not restrict.
type Filter struct {
	Capabilities  []string `json:"capabilities,omitempty"`
	ExcludeAgents []string `json:"excludeAgents,omitempty"`
	IncludeAgents []string `json:"includeAgents,omitempty"`
	PersonaTypes  []string `json:"personaTypes,omitempty"`
}

type metadata struct {
	Filter *Filter `json:"filter,omitempty"`
}

// Admits reports whether the filter lets self receive a message.
func (f *Filter) Admits(self Self) bool {
	if f == nil {
		return true
	}
	if slices.Contains(f.ExcludeAgents, self.AgentID) {
		return false
	}
	if len(f.IncludeAgents) > 0 && !slices.Contains(f.IncludeAgents, self.AgentID) {
		return false
	}
	if len(f.PersonaTypes) > 0 && !slices.Contains(f.PersonaTypes, self.PersonaType) {
		return false
	}
	for _, c := range f.Capabilities {
		if !slices.Contains(self.Capabilities, c) {
			return false
		}
	}
	return true
}

// FilterOf returns the filter an envelope carries, or nil.
func FilterOf(e *protocol.Envelope) (*Filter, error) {
	if len(e.Metadata) == 0 {
		return nil, nil
	}
	var md metadata
	if err := json.Unmarshal(e.Metadata, &md); err != nil {
		return nil, err
	}
	return md.Filter, nil
}

func (b *Bus) admit(e *protocol.Envelope) bool {
	f, err := FilterOf(e)
	if err != nil {
		return false
	}
	return f.Admits(*b.cfg.self)
}

func validPattern(p string) bool {
	_, err := path.Match(p, "")
	return err == nil
}
