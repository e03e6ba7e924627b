package pubsub

import (
	"strings"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"
)

// topicMetrics counts topic messages by family. A family is a label only
// once this node has joined it (published or subscribed): GossipSub
// validates and delivers messages of joined topics only, so a peer cannot
// grow the label set. A nil *topicMetrics records nothing.
type topicMetrics struct {
	published *prometheus.CounterVec
	delivered *prometheus.CounterVec
	dropped   *prometheus.CounterVec
	rejected  *prometheus.CounterVec
}

// Rejection reasons, the label set of meshagent_topic_messages_rejected_total:
// the validator's (validate), then GossipSub's own, folded into a few.
const (
	rejectSize         = "size"         // empty, or over the size limit
	rejectMalformed    = "malformed"    // no author, not canonical, a bad timestamp or filter
	rejectSignature    = "signature"    // the signature is not the named author's (or GossipSub's own where none is allowed)
	rejectMisaddressed = "misaddressed" // not a broadcast notify of this topic family
	rejectReplay       = "replay"       // (author, id) seen, or the timestamp outside the clock skew: ignored, not rejected
	rejectInvalid      = "invalid"      // the validator rejected it for no reason of the above
	rejectIgnored      = "ignored"      // the validator ignored it for no reason of the above
	rejectThrottled    = "throttled"    // too many validations in flight
	rejectQueueFull    = "queue_full"   // the validation queue was full
	rejectOther        = "other"        // anything else GossipSub refuses (blacklisted, self-originated)
)

// newTopicMetrics registers the topic figures with reg; with a nil reg
// it returns nil, which records nothing.
func newTopicMetrics(reg prometheus.Registerer) (*topicMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	family := []string{"family"}
	m := &topicMetrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshagent_topic_messages_published_total",
			Help: "Topic messages this node published, by topic family.",
		}, family),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshagent_topic_messages_delivered_total",
			Help: "Topic messages handed to a local subscription, by topic family (once per matching subscription).",
		}, family),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshagent_topic_messages_dropped_total",
			Help: "Topic messages dropped because a local subscription's queue was full, by topic family.",
		}, family),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshagent_topic_messages_rejected_total",
			Help: "Topic messages not accepted, by topic family and reason (size, malformed, signature, misaddressed, replay, invalid, ignored, throttled, queue_full, other).",
		}, []string{"family", "reason"}),
	}
	for _, c := range []prometheus.Collector{m.published, m.delivered, m.dropped, m.rejected} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *topicMetrics) publish(fam string) {
	if m != nil {
		m.published.WithLabelValues(fam).Inc()
	}
}

func (m *topicMetrics) deliver(fam string, ok bool) {
	switch {
	case m == nil:
	case ok:
		m.delivered.WithLabelValues(fam).Inc()
	default:
		m.dropped.WithLabelValues(fam).Inc()
	}
}

// options returns the GossipSub options that count rejections (a raw
// tracer), none when m is nil.
func (m *topicMetrics) options() []libp2ppubsub.Option {
	if m == nil {
		return nil
	}
	return []libp2ppubsub.Option{libp2ppubsub.WithRawTracer(rejectTracer{m})}
}

// rejectTracer counts the messages GossipSub rejects. Its methods run on
// the router's event loop and only touch a counter; the events it does
// not count are no-ops.
type rejectTracer struct{ m *topicMetrics }

var _ libp2ppubsub.RawTracer = rejectTracer{}

func (t rejectTracer) RejectMessage(msg *libp2ppubsub.Message, reason string) {
	fam, ok := strings.CutPrefix(msg.GetTopic(), GossipPrefix)
	if !ok {
		return // not a meshagent topic: not a label
	}
	why := rejectReason(reason)
	// The validator leaves its reason in the message it did not accept.
	if v, ok := msg.ValidatorData.(string); ok && v != "" && (why == rejectInvalid || why == rejectIgnored) {
		why = v
	}
	t.m.rejected.WithLabelValues(fam, why).Inc()
}

func (rejectTracer) AddPeer(peer.ID, libp2pprotocol.ID)             {}
func (rejectTracer) RemovePeer(peer.ID)                             {}
func (rejectTracer) Join(string)                                    {}
func (rejectTracer) Leave(string)                                   {}
func (rejectTracer) Graft(peer.ID, string)                          {}
func (rejectTracer) Prune(peer.ID, string)                          {}
func (rejectTracer) ValidateMessage(*libp2ppubsub.Message)          {}
func (rejectTracer) DeliverMessage(*libp2ppubsub.Message)           {}
func (rejectTracer) DuplicateMessage(*libp2ppubsub.Message)         {}
func (rejectTracer) ThrottlePeer(peer.ID)                           {}
func (rejectTracer) RecvRPC(*libp2ppubsub.RPC)                      {}
func (rejectTracer) SendRPC(*libp2ppubsub.RPC, peer.ID)             {}
func (rejectTracer) DropRPC(*libp2ppubsub.RPC, peer.ID)             {}
func (rejectTracer) UndeliverableMessage(*libp2ppubsub.Message)     {}
func (rejectTracer) OnNewOutboundStream(peer.ID, libp2pprotocol.ID) {}
func (rejectTracer) OnClosedOutboundStream(peer.ID)                 {}

func rejectReason(reason string) string {
	switch reason {
	case libp2ppubsub.RejectValidationFailed:
		return rejectInvalid
	case libp2ppubsub.RejectValidationIgnored:
		return rejectIgnored
	case libp2ppubsub.RejectValidationThrottled:
		return rejectThrottled
	case libp2ppubsub.RejectValidationQueueFull:
		return rejectQueueFull
	case libp2ppubsub.RejectMissingSignature, libp2ppubsub.RejectInvalidSignature,
		libp2ppubsub.RejectUnexpectedSignature, libp2ppubsub.RejectUnexpectedAuthInfo:
		return rejectSignature
	default:
		return rejectOther
	}
}
