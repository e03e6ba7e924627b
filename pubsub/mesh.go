package pubsub

import (
	"sync"
	"sync/atomic"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
)

// meshTracer follows GRAFT and PRUNE so that Topics can tell how many
// mesh peers a GossipSub topic has. Its methods run on the router's event
// loop and only take a short lock.
type meshTracer struct {
	mu   sync.Mutex
	mesh map[string]map[peer.ID]struct{}
	// subscribed, when set, hears of each GossipSub topic a peer
	// subscribes to (a keeper of every family learns them so).
	subscribed atomic.Pointer[func(topic string)]

	// streams is closed, and replaced, each time the router opens its
	// stream to a peer. The router lists a peer among a topic's peers
	// (ListPeers) only once it holds a queue for it, which may be after
	// the peer's subscription arrived (and its PeerJoin event went out):
	// a Publish waiting for receivers counts again then.
	streamsMu sync.Mutex
	streams   chan struct{}
}

// RecvRPC passes the topics a peer subscribes to on to subscribed.
func (t *meshTracer) RecvRPC(rpc *libp2ppubsub.RPC) {
	fn := t.subscribed.Load()
	if fn == nil {
		return
	}
	for _, s := range rpc.GetSubscriptions() {
		if s.GetSubscribe() {
			(*fn)(s.GetTopicid())
		}
	}
}

var _ libp2ppubsub.RawTracer = (*meshTracer)(nil)

func newMeshTracer() *meshTracer {
	return &meshTracer{mesh: map[string]map[peer.ID]struct{}{}, streams: make(chan struct{})}
}

// OnNewOutboundStream wakes whoever waits on nextStream.
func (t *meshTracer) OnNewOutboundStream(peer.ID, libp2pprotocol.ID) {
	t.streamsMu.Lock()
	defer t.streamsMu.Unlock()
	close(t.streams)
	t.streams = make(chan struct{})
}

// nextStream returns a channel closed when the router next opens a
// stream to a peer.
func (t *meshTracer) nextStream() <-chan struct{} {
	t.streamsMu.Lock()
	defer t.streamsMu.Unlock()
	return t.streams
}

func (t *meshTracer) count(topic string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.mesh[topic])
}

// countIf counts the topic's mesh peers for which keep is true. keep
// runs under the tracer's lock: it must not call back into the router.
func (t *meshTracer) countIf(topic string, keep func(peer.ID) bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for p := range t.mesh[topic] {
		if keep(p) {
			n++
		}
	}
	return n
}

func (t *meshTracer) Graft(p peer.ID, topic string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.mesh[topic]
	if m == nil {
		m = map[peer.ID]struct{}{}
		t.mesh[topic] = m
	}
	m[p] = struct{}{}
}

func (t *meshTracer) Prune(p peer.ID, topic string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.mesh[topic], p)
}

func (t *meshTracer) Leave(topic string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.mesh, topic)
}

func (t *meshTracer) RemovePeer(p peer.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range t.mesh {
		delete(m, p)
	}
}

func (*meshTracer) AddPeer(peer.ID, libp2pprotocol.ID)          {}
func (*meshTracer) OnClosedOutboundStream(peer.ID)              {}
func (*meshTracer) Join(string)                                 {}
func (*meshTracer) ValidateMessage(*libp2ppubsub.Message)       {}
func (*meshTracer) DeliverMessage(*libp2ppubsub.Message)        {}
func (*meshTracer) RejectMessage(*libp2ppubsub.Message, string) {}
func (*meshTracer) DuplicateMessage(*libp2ppubsub.Message)      {}
func (*meshTracer) ThrottlePeer(peer.ID)                        {}
func (*meshTracer) SendRPC(*libp2ppubsub.RPC, peer.ID)          {}
func (*meshTracer) DropRPC(*libp2ppubsub.RPC, peer.ID)          {}
func (*meshTracer) UndeliverableMessage(*libp2ppubsub.Message)  {}
