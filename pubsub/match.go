package pubsub

import (
	"strings"

	"github.com/meshagent/meshagent/protocol"
)

// GossipPrefix is the prefix of every GossipSub topic Topics uses.
const GossipPrefix = "/meshagent/topic/"

// Family returns the part of a topic or pattern before the first ':' or
// '.', or the whole name if it has neither: "inbound:chat-1" and
// "inbound.chat" are of family "inbound", seed 004's
// "bead.status.completed" of family "bead".
func Family(topic string) string { return protocol.TopicFamily(topic) }

// GossipTopic maps a bus topic to its GossipSub topic.
func GossipTopic(topic string) string { return GossipPrefix + Family(topic) }

func hasWild(s string) bool { return strings.ContainsAny(s, "*?[\\") }

// Match reports whether a bus pattern matches a topic; see
// protocol.MatchTopic.
func Match(pattern, topic string) bool { return protocol.MatchTopic(pattern, topic) }
