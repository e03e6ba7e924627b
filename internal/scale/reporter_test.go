package scale

import (
	"strings"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/metrics"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
)

// gossipReporter is libp2p's bandwidth counter that also counts the
// writes on the GossipSub protocols: go-libp2p-pubsub writes each RPC in
// one stream write, so writes are RPCs sent.
type gossipReporter struct {
	*metrics.BandwidthCounter
	writes, bytes atomic.Int64
}

func newGossipReporter() *gossipReporter {
	return &gossipReporter{BandwidthCounter: metrics.NewBandwidthCounter()}
}

func isGossip(p protocol.ID) bool {
	return strings.HasPrefix(string(p), "/meshsub/") || strings.HasPrefix(string(p), "/floodsub/")
}

func (r *gossipReporter) LogSentMessageStream(size int64, p protocol.ID, id peer.ID) {
	if isGossip(p) {
		r.writes.Add(1)
		r.bytes.Add(size)
	}
	r.BandwidthCounter.LogSentMessageStream(size, p, id)
}

// sent returns the GossipSub RPCs and bytes sent so far.
func (r *gossipReporter) sent() (msgs, bytes int64) { return r.writes.Load(), r.bytes.Load() }
