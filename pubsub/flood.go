package pubsub

import (
	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// Flood publishing, per message. GossipSub sends a node's own message to
// its mesh (or, when the node does not subscribe to the topic, to a
// fanout of D topic peers), or, with flood publishing, to every topic
// peer. Flooding is needed only while the mesh forms: a node that has
// just subscribed has an empty mesh until a heartbeat grafts, gossip goes
// only to non-mesh peers, and peers grafted later never get a message the
// mesh did not carry, so a mesh-only publish right after subscribing
// could reach nobody. Once formed, the mesh reaches every subscriber
// through forwarding, and flooding only multiplies the publisher's sends
// (one per topic peer, nearly N on a well-connected mesh, instead of D).
// A fanout is chosen from the topic peers when the message is sent, so a
// node that only publishes never needs to flood.
//
// The router's flood setting is one flag for all messages. Publish
// decides for each message (floodNeeded) and the decision travels with
// the message (ownMessage). The router hands a message to its local
// subscriptions, through their message filters, and then sends it, on
// its event loop, in one step: the filter of the family's subscription
// (floodSwitch) sets the flag there, where the router reads it. A family
// this node only publishes to has no subscription and never floods; the
// flag keeps its last value for it, so at worst a message of such a
// family, sent right after one that flooded, floods too.

// meshFormed is the mesh size from which a node's own messages go
// through the mesh alone: GossipSub grafts peers up to D whenever a mesh
// has fewer than Dlo, so a formed mesh holds at least Dlo (or every topic
// peer, when there are fewer).
var meshFormed = libp2ppubsub.DefaultGossipSubParams().Dlo

// floodNeeded says whether this node's message of family f, with peers
// topic peers connected, must be flooded: while the node subscribes to
// the family and its mesh has not formed. A mesh peer whose connection
// has closed is not counted: the router keeps it in the mesh until it
// has processed the close, and a message sent through a mesh of only
// such peers reaches the others by gossip, a heartbeat later or more.
func (tp *Topics) floodNeeded(f *family, peers int) bool {
	tp.mu.Lock()
	subscribed := f.sub != nil
	tp.mu.Unlock()
	if !subscribed {
		return false
	}
	net := tp.h.Network()
	mesh := tp.mesh.countIf(f.topic.String(), func(p peer.ID) bool { return net.Connectedness(p) == network.Connected })
	return mesh < min(meshFormed, peers)
}

// floodSwitch is the message filter of a family's subscription: it
// delivers every message and, for this node's own, sets the router's
// flood flag as Publish decided, just before the router sends it.
func (tp *Topics) floodSwitch(m *libp2ppubsub.Message) bool {
	if own, ok := m.ValidatorData.(*ownMessage); ok {
		// The option only sets the router's field; it fails only for a
		// router that is not GossipSub.
		_ = libp2ppubsub.WithFloodPublish(own.flood)(tp.ps)
	}
	return true
}
