package protocol

import (
	"encoding/json"
	"errors"
	"path"
	"slices"
	"strings"
	"time"
)

// ErrNoPeers is returned when a message published to a topic would reach no
// agent: nobody subscribes to the topic's family, or none was found within
// the publish wait. A publish is never silently lost.
var ErrNoPeers = errors.New("no agent subscribes to the topic")

// Filter is a seed 004 broadcast filter. It travels in a notify
// envelope's metadata under "filter" and is applied by each receiver.
// Empty lists do not restrict; all non-empty lists must admit the
// receiver.
type Filter struct {
	// Capabilities the receiver must all offer.
	Capabilities []string `json:"capabilities,omitempty"`
	// ExcludeAgents never receive the message (agent ids).
	ExcludeAgents []string `json:"excludeAgents,omitempty"`
	// IncludeAgents, if non-empty, are the only receivers (agent ids).
	IncludeAgents []string `json:"includeAgents,omitempty"`
	// PersonaTypes, if non-empty, lists the receiver persona types admitted.
	PersonaTypes []string `json:"personaTypes,omitempty"`
}

// Admits reports whether the filter lets an agent receive a message. A nil
// filter admits everyone.
func (f *Filter) Admits(agentID, personaType string, capabilities []string) bool {
	if f == nil {
		return true
	}
	if slices.Contains(f.ExcludeAgents, agentID) {
		return false
	}
	if len(f.IncludeAgents) > 0 && !slices.Contains(f.IncludeAgents, agentID) {
		return false
	}
	if len(f.PersonaTypes) > 0 && !slices.Contains(f.PersonaTypes, personaType) {
		return false
	}
	for _, c := range f.Capabilities {
		if !slices.Contains(capabilities, c) {
			return false
		}
	}
	return true
}

// TopicMessage is a message received on a mesh topic, as applications see
// it: the envelope's signature has been verified and its filter applied.
type TopicMessage struct {
	// Topic is the exact topic the message was published to.
	Topic string `json:"topic"`
	// From is the author's agent id (the peer ID that signed it).
	From string `json:"from"`
	// Payload is the published JSON value.
	Payload json.RawMessage `json:"payload"`
	// Time is the author's envelope timestamp.
	Time time.Time `json:"time"`
	// ID is the envelope id.
	ID string `json:"id"`
}

// MatchTopic reports whether a bus pattern matches a topic, as seed 001
// reads and DESIGN.md settles it: fnmatch-style (path.Match: "*", "?",
// "[...]", where "*" does not cross "/") when the pattern has wildcards;
// as a prefix when it has none and ends in ':', '-', '.', '/' or '_'
// ("inbound:chat-" matches "inbound:chat-1"); exactly otherwise.
func MatchTopic(pattern, topic string) bool {
	if strings.ContainsAny(pattern, "*?[\\") {
		ok, err := path.Match(pattern, topic)
		return err == nil && ok
	}
	if pattern != "" && strings.ContainsRune(":-./_", rune(pattern[len(pattern)-1])) {
		return strings.HasPrefix(topic, pattern)
	}
	return pattern == topic
}

// ValidPattern reports whether a pattern is well formed (no unterminated
// "[" class).
func ValidPattern(pattern string) bool {
	_, err := path.Match(pattern, "")
	return err == nil
}

// TopicFamily returns the part of a topic or pattern before the first ':'
// or '.', or the whole name if it has neither. The mesh carries each family
// on one GossipSub topic.
func TopicFamily(topic string) string {
	if i := strings.IndexAny(topic, ":."); i >= 0 {
		return topic[:i]
	}
	return topic
}
