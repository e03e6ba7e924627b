package scale

import (
	"encoding/binary"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"
)

// kindTracer splits the GossipSub RPCs a cluster sends by what they
// carry: messages by topic (a node's own, flood-published, and forwarded
// ones alike), IHAVE, IWANT, GRAFT, PRUNE and subscriptions; and what the
// router refused or dropped (rejected messages by reason, RPCs dropped on
// a full peer queue). The gossip reporter counts stream writes; this says
// which kind grows with N.
type kindTracer struct {
	mu     sync.Mutex
	counts map[string]int64
	// seen holds the messages sent so far (their first 64 bytes, the
	// envelope's signature for the mesh), to count distinct ones.
	seen map[string]bool
	// rpcs and bytes count every RPC handed to a peer's queue and its
	// bytes on the wire (the length prefix and the protobuf, as
	// go-libp2p-pubsub writes it): on mocknet, which has no bandwidth
	// reporter, they are the gossip sent.
	rpcs, bytes atomic.Int64
}

func newKindTracer() *kindTracer {
	return &kindTracer{counts: map[string]int64{}, seen: map[string]bool{}}
}

func (t *kindTracer) SendRPC(rpc *libp2ppubsub.RPC, _ peer.ID) {
	size := proto.Size(&rpc.RPC)
	t.rpcs.Add(1)
	t.bytes.Add(int64(size + len(binary.AppendUvarint(nil, uint64(size)))))
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range rpc.GetPublish() {
		if d := m.GetData(); len(d) >= 64 && !t.seen[string(d[:64])] {
			t.seen[string(d[:64])] = true
			t.counts["distinct "+m.GetTopic()]++
		}
		t.counts["msg "+m.GetTopic()]++
		t.counts["msg bytes "+m.GetTopic()] += int64(len(m.GetData()))
	}
	ctl := rpc.GetControl()
	for _, ih := range ctl.GetIhave() {
		t.counts["ihave "+ih.GetTopicID()]++
		t.counts["ihave ids "+ih.GetTopicID()] += int64(len(ih.GetMessageIDs()))
	}
	for _, iw := range ctl.GetIwant() {
		t.counts["iwant"]++
		t.counts["iwant ids"] += int64(len(iw.GetMessageIDs()))
	}
	t.counts["graft"] += int64(len(ctl.GetGraft()))
	t.counts["prune"] += int64(len(ctl.GetPrune()))
	t.counts["idontwant"] += int64(len(ctl.GetIdontwant()))
	t.counts["subscription"] += int64(len(rpc.GetSubscriptions()))
	t.counts["rpc"]++
}

// sent returns the RPCs and bytes sent so far (never reset).
func (t *kindTracer) sent() (msgs, bytes int64) { return t.rpcs.Load(), t.bytes.Load() }

func (t *kindTracer) add(k string) {
	t.mu.Lock()
	t.counts[k]++
	t.mu.Unlock()
}

// take returns the counts so far and starts afresh.
func (t *kindTracer) take() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.counts
	t.counts = map[string]int64{}
	t.seen = map[string]bool{}
	return c
}

// split formats counts per node per published message.
func split(c map[string]int64, per float64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(c)) {
		fmt.Fprintf(&b, " %s=%.2f", strings.TrimPrefix(k, "/meshagent/topic/"), float64(c[k])/per)
	}
	return b.String()
}

func (*kindTracer) AddPeer(peer.ID, protocol.ID)                        {}
func (*kindTracer) RemovePeer(peer.ID)                                  {}
func (*kindTracer) Join(string)                                         {}
func (*kindTracer) Leave(string)                                        {}
func (*kindTracer) Graft(peer.ID, string)                               {}
func (*kindTracer) Prune(peer.ID, string)                               {}
func (*kindTracer) ValidateMessage(*libp2ppubsub.Message)               {}
func (*kindTracer) DeliverMessage(*libp2ppubsub.Message)                {}
func (t *kindTracer) RejectMessage(_ *libp2ppubsub.Message, why string) { t.add("reject " + why) }
func (*kindTracer) DuplicateMessage(*libp2ppubsub.Message)              {}
func (t *kindTracer) ThrottlePeer(peer.ID)                              { t.add("throttled") }
func (*kindTracer) RecvRPC(*libp2ppubsub.RPC)                           {}
func (t *kindTracer) DropRPC(*libp2ppubsub.RPC, peer.ID)                { t.add("dropped rpc") }
func (t *kindTracer) UndeliverableMessage(*libp2ppubsub.Message)        { t.add("undeliverable") }
func (*kindTracer) OnNewOutboundStream(peer.ID, protocol.ID)            {}
func (*kindTracer) OnClosedOutboundStream(peer.ID)                      {}

var _ libp2ppubsub.RawTracer = (*kindTracer)(nil)
