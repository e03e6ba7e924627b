package pubsub

import (
	"strings"

	"github.com/meshagent/meshagent/protocol"
)

// GossipPrefix is the prefix of every GossipSub topic the bus uses.
const GossipPrefix = "/meshagent/topic/"

// Family returns the part of a topic or pattern before the first ':', or
// the whole name if it has none.
func Family(topic string) string {
	f, _, _ := strings.Cut(topic, ":")
	return f
}

// GossipTopic maps a bus topic to its GossipSub topic.
func GossipTopic(topic string) string { return GossipPrefix + Family(topic) }

func hasWild(s string) bool { return strings.ContainsAny(s, "*?[\\") }

// Match reports whether a bus pattern matches a topic; see
// protocol.MatchTopic.
func Match(pattern, topic string) bool { return protocol.MatchTopic(pattern, topic) }
