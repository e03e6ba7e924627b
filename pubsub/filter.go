package pubsub

import (
	"path"

	"github.com/meshagent/meshagent/protocol"
)

// Filter is a seed 004 broadcast filter; see protocol.Filter.
type Filter = protocol.Filter

type metadata struct {
	Filter *Filter `json:"filter,omitempty"`
}

// FilterOf returns the filter an envelope carries, or nil.
func FilterOf(e *protocol.Envelope) (*Filter, error) {
	if len(e.Metadata) == 0 {
		return nil, nil
	}
	var md metadata
	if err := protocol.DecodePayload(e.Metadata, "metadata", &md); err != nil {
		return nil, err
	}
	return md.Filter, nil
}

func (tp *Topics) admit(e *protocol.Envelope) bool {
	f, err := FilterOf(e)
	if err != nil {
		return false
	}
	self := tp.self.Load()
	return f.Admits(self.AgentID, self.PersonaType, self.Capabilities)
}

func validPattern(p string) bool {
	_, err := path.Match(p, "")
	return err == nil
}
