package dht

import (
	"github.com/ipfs/go-cid"
	"github.com/multiformats/go-multihash"

	"github.com/meshagent/meshagent/protocol"
)

// CapabilityKey is the DHT key under which providers of a capability name
// are recorded.
func CapabilityKey(name string) cid.Cid { return key("meshagent:capability:" + name) }

// KeywordKey is the DHT key under which providers of capabilities with the
// keyword are recorded.
func KeywordKey(keyword string) cid.Cid { return key("meshagent:keyword:" + keyword) }

// TopicKey is the DHT key under which the subscribers of a topic
// namespace are recorded (see Directory.TopicDiscovery).
func TopicKey(namespace string) cid.Cid { return key("meshagent:topic:" + namespace) }

func key(s string) cid.Cid {
	mh, err := multihash.Sum([]byte(s), multihash.SHA2_256, -1)
	if err != nil {
		panic("dht: sha256 multihash: " + err.Error()) // sha256 is always registered
	}
	return cid.NewCidV1(cid.Raw, mh)
}

// keysOf returns the deduplicated keys of a capability set.
func keysOf(caps []protocol.Capability) map[cid.Cid]struct{} {
	keys := make(map[cid.Cid]struct{})
	for _, c := range caps {
		keys[CapabilityKey(c.Name)] = struct{}{}
		for _, kw := range c.Keywords {
			keys[KeywordKey(kw)] = struct{}{}
		}
	}
	return keys
}

// matches reports whether a capability answers the query.
func matches(c protocol.Capability, query string, byKeyword bool) bool {
	if !byKeyword {
		return c.Name == query
	}
	for _, kw := range c.Keywords {
		if kw == query {
			return true
		}
	}
	return false
}
