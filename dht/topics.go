package dht

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/discovery"
	"github.com/libp2p/go-libp2p/core/peer"
)

// DefaultTopicPeerLimit bounds how many subscribers one topic lookup
// returns when the caller sets no limit: enough to join a GossipSub mesh
// (D = 6) with spares, without dialling every subscriber of a busy topic.
const DefaultTopicPeerLimit = 12

// TopicDiscovery returns the directory as a libp2p discovery service for
// topic namespaces, the form go-libp2p-pubsub's WithDiscovery takes:
// subscribers advertise themselves under TopicKey(namespace) and
// publishers find them, so that a topic's peers meet even when no path of
// subscribers connects them.
func (d *Directory) TopicDiscovery() discovery.Discovery { return topicDiscovery{d} }

type topicDiscovery struct{ d *Directory }

var _ discovery.Discovery = topicDiscovery{}

// TopicAdvertisers is how many subscribers of one topic namespace
// advertise it in the directory at a time, by default
// (WithTopicAdvertisers): a subscriber that finds this many others'
// records does not add its own, and looks again after AdvertiseRecheck. Publishers and thin subscribers find up to
// DefaultTopicPeerLimit of them and GossipSub carries a message from
// there to every subscriber, so more records add nothing but load: at a
// fixed cost per subscriber, every subscriber of a mesh-wide topic (the
// presence family has all of them) would store its record at the same
// closest peers, each of which would then hold and serve N records, and
// provide it again each time its routing table doubled.
const TopicAdvertisers = 2 * DefaultTopicPeerLimit

// AdvertiseRecheck is how long a subscriber that found TopicAdvertisers
// records waits before it looks again (go-libp2p-pubsub calls Advertise
// again after the interval it returns), so that records that expired
// with their subscribers are replaced within it.
const AdvertiseRecheck = 10 * time.Minute

// AdvertiseSpread is the span over which a subscriber delays its topic
// advertisement, by default (WithAdvertiseSpread): each waits a random
// part of it first. Subscribers that join a topic together (a mesh
// started at once, or every agent's presence subscription after a
// restart) would otherwise all look at the same instant, all find no
// records, and all provide: at N = 100, 99 provides of one key, each a
// lookup and some 20 stores, where TopicAdvertisers records suffice, and
// kad-dht keeps each of their streams open a minute after. Spread over
// 5 s, the subscribers that look once the first records are stored find
// enough and do not add theirs. The price is that the first subscriber
// of a new topic is found through the directory up to 5 s later;
// connected peers learn of its subscription from GossipSub at once.
const AdvertiseSpread = 5 * time.Second

// Advertise provides the namespace's key, unless TopicAdvertisers (the
// configured number of) other
// subscribers already do (then it returns AdvertiseRecheck), and returns
// when to do it again (the directory's re-provide interval). It first
// waits a random part of AdvertiseSpread. While ctx
// lives the directory also provides the key whenever its routing table
// doubles, as it does the capabilities' (see Advertise). A failed
// provide, typically an empty routing table while the node is joining,
// is retried here with a backoff until it succeeds or ctx ends, because
// go-libp2p-pubsub would otherwise wait two minutes before its next
// attempt.
func (t topicDiscovery) Advertise(ctx context.Context, ns string, _ ...discovery.Option) (time.Duration, error) {
	d := t.d
	k := TopicKey(ns)
	if d.spread > 0 && !d.pause(ctx, rand.N(d.spread)) {
		return d.every, nil
	}
	if t.enoughAdvertisers(ctx, k) {
		return min(AdvertiseRecheck, d.every), nil
	}
	d.holdTopic(ctx, k)
	retry := retryAfter
	for {
		err := d.provideBounded(ctx, k)
		if err == nil {
			return d.every, nil
		}
		d.log.Debug("dht: topic provide failed", "namespace", ns, "err", err)
		if !d.pause(ctx, retry) {
			return d.every, nil
		}
		retry = min(retry*2, d.every)
	}
}

// pause waits for wait and reports true, or reports false as soon as ctx
// (the subscription) or the directory ends: then there is nothing to
// report, and go-libp2p-pubsub stops advertising because ctx is done.
func (d *Directory) pause(ctx context.Context, wait time.Duration) bool {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-d.ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// enoughAdvertisers reports whether at least the configured number of
// others provide k (a lookup that stops once it has found them).
func (t topicDiscovery) enoughAdvertisers(ctx context.Context, k cid.Cid) bool {
	ctx, cancel := context.WithTimeout(ctx, advertiserLookupBound)
	defer cancel()
	n := 0
	for range t.d.findKey(ctx, k, t.d.advertisers+1) { // self may be one
		n++
	}
	return n >= t.d.advertisers
}

// advertiserLookupBound bounds Advertise's lookup of the records already
// there; past it the subscriber provides its own.
const advertiserLookupBound = 30 * time.Second

// FindPeers streams subscribers of the namespace, without self, up to the
// discovery.Limit option (default DefaultTopicPeerLimit).
func (t topicDiscovery) FindPeers(ctx context.Context, ns string, opts ...discovery.Option) (<-chan peer.AddrInfo, error) {
	var o discovery.Options
	if err := o.Apply(opts...); err != nil {
		return nil, err
	}
	limit := o.Limit
	if limit <= 0 {
		limit = DefaultTopicPeerLimit
	}
	return t.d.findKey(ctx, TopicKey(ns), limit), nil
}
