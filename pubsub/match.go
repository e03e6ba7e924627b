package pubsub

import (
	"path"
	"strings"
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

// Match reports whether a bus pattern matches a topic: fnmatch-style when
// the pattern has wildcards, as a prefix when it has none and ends in ':',
// '-', '.', '/' or '_', and exactly otherwise.
func Match(pattern, topic string) bool {
	if hasWild(pattern) {
		ok, err := path.Match(pattern, topic)
		if err == nil {
			return ok
		}
		return false
	}
	if pattern != "" && strings.ContainsRune(":-./_", rune(pattern[len(pattern)-1])) {
		return strings.HasPrefix(topic, pattern)
	}
	return pattern == topic
}
