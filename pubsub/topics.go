package pubsub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Self describes the local agent for seed 004 filters.
type Self struct {
	// AgentID is matched against includeAgents and excludeAgents.
	AgentID string
	// PersonaType is matched against personaTypes.
	PersonaType string
	// Capabilities must hold every name in a filter's capabilities.
	Capabilities []string
}

// Message is an envelope received on a topic.
type Message struct {
	// Topic is the envelope's to.topic, which the subscription's pattern
	// matched.
	Topic string
	// From is the author (from.agentId, whose signature verified), not
	// the peer that forwarded the message.
	From peer.ID
	// Envelope is the verified envelope.
	Envelope *protocol.Envelope
	// Payload is the envelope's payload, as signed.
	Payload json.RawMessage
	// ReceivedAt is when this node read the message (for a message
	// fetched from a history keeper, when it was fetched).
	ReceivedAt time.Time
	// data is the message as signed (signature ‖ canonical envelope), what
	// a history keeper keeps.
	data []byte
}

// Topics is a GossipSub router carrying signed envelopes.
type Topics struct {
	h      host.Host
	signer *sign.Signer
	cfg    config
	ps     *libp2ppubsub.PubSub
	mesh   *meshTracer
	met    *topicMetrics // nil: none
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	self atomic.Pointer[Self]

	mu       sync.Mutex
	closed   bool
	families map[string]*family
	// added is closed, and replaced, when a local subscription is added:
	// a waiting Publish counts it.
	added chan struct{}
	// durables are the durable subscriptions running, by name.
	durables map[string]*Durable
	// held is the bytes of live messages the durables hold (heldSize).
	held atomic.Int64

	keeper *keeper // nil unless WithArchive
}

type family struct {
	topic *libp2ppubsub.Topic
	sub   *libp2ppubsub.Subscription // nil when only publishing
	subs  map[*Subscription]struct{}
}

// MessageIDSize is the length in bytes of a GossipSub message id here.
const MessageIDSize = 12

// MessageID is the GossipSub message id of a message of this mesh (for
// libp2ppubsub.WithMessageIdFn): the first MessageIDSize bytes of its
// signature, as a binary string. See "Message ids" in the package doc;
// a router that gossips with meshagent nodes must use the same.
func MessageID(m *pb.Message) string {
	d := m.GetData()
	return string(d[:min(len(d), MessageIDSize)])
}

// scoreRecordTTL is how long peer scoring keeps a message's delivery
// record (which peers delivered it, and when), GossipSub's
// PeerScoreParams.SeenMsgTTL; its default is 2 minutes. The records feed
// only the per-topic counters (first, mesh and invalid deliveries), and
// no topic is scored here (scoreParams' Topics is empty), so they decide
// nothing: kept 2 minutes, they were the largest part of GossipSub's
// state on a mesh agent (0.29 MB at N = 100). 5 s covers a message's
// validation and the duplicates of its gossip window (3 heartbeats);
// GossipSub sweeps expired records once a minute, so one lives at most
// a minute longer. A topic scored later needs this to be at least its
// MeshMessageDeliveriesWindow and the span of its counters' use.
const scoreRecordTTL = 5 * time.Second

// seenTTL is how long GossipSub's seen-message cache remembers a message
// id (WithSeenMessagesTTL; its default is 2 minutes). The cache is a
// cheap first filter of duplicates: a message arrives again from honest
// peers only within its gossip window (the message cache's 5 heartbeats,
// 5 s), and one that arrives after the cache forgot it is validated and
// ignored by the replay guard, which remembers every (sender, id) for
// its window (sign.DefaultReplayWindow, 2 minutes) and is what refuses
// replays. GossipSub sweeps the cache once a minute, so an id lives at
// most a minute longer.
const seenTTL = 30 * time.Second

func scoreParams() (*libp2ppubsub.PeerScoreParams, *libp2ppubsub.PeerScoreThresholds) {
	return &libp2ppubsub.PeerScoreParams{
			Topics:                    map[string]*libp2ppubsub.TopicScoreParams{},
			AppSpecificScore:          func(peer.ID) float64 { return 0 },
			IPColocationFactorWeight:  0, // off: see the package doc
			BehaviourPenaltyWeight:    -1,
			BehaviourPenaltyThreshold: 6,
			BehaviourPenaltyDecay:     0.9,
			DecayInterval:             time.Second,
			DecayToZero:               0.01,
			RetainScore:               10 * time.Minute,
			SeenMsgTTL:                scoreRecordTTL,
		}, &libp2ppubsub.PeerScoreThresholds{
			GossipThreshold:             -100,
			PublishThreshold:            -500,
			GraylistThreshold:           -1000,
			AcceptPXThreshold:           10,
			OpportunisticGraftThreshold: 3,
		}
}

// New starts a GossipSub router on h publishing as signer.
func New(h host.Host, signer *sign.Signer, opts ...Option) (*Topics, error) {
	cfg := defaultConfig()
	if err := cfg.apply(opts...); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.guard == nil {
		cfg.guard = sign.NewReplayGuard(0, 0)
	}
	if cfg.self == nil {
		cfg.self = &Self{AgentID: signer.ID().String()}
	}
	met, err := newTopicMetrics(cfg.reg)
	if err != nil {
		return nil, fmt.Errorf("pubsub: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	sp, st := scoreParams()
	mesh := newMeshTracer()
	psOpts := []libp2ppubsub.Option{
		libp2ppubsub.WithMessageSignaturePolicy(libp2ppubsub.StrictNoSign),
		libp2ppubsub.WithMessageIdFn(MessageID),
		libp2ppubsub.WithPeerScore(sp, st),
		libp2ppubsub.WithSeenMessagesTTL(seenTTL),
		libp2ppubsub.WithMaxMessageSize(cfg.maxSize + 4096),
		libp2ppubsub.WithRawTracer(mesh),
		// Set for each of this node's own messages: see flood.go.
		libp2ppubsub.WithFloodPublish(false),
	}
	if cfg.disc != nil {
		psOpts = append(psOpts, libp2ppubsub.WithDiscovery(cfg.disc))
	}
	for _, t := range cfg.tracers {
		psOpts = append(psOpts, libp2ppubsub.WithRawTracer(t))
	}
	psOpts = append(psOpts, met.options()...)
	ps, err := libp2ppubsub.NewGossipSub(ctx, withUnprotected(h, cfg.unprotected), psOpts...)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("pubsub: gossipsub: %w", err)
	}
	tp := &Topics{h: h, signer: signer, cfg: cfg, ps: ps, mesh: mesh, met: met, ctx: ctx, cancel: cancel, families: map[string]*family{}, added: make(chan struct{}), durables: map[string]*Durable{}}
	tp.self.Store(cfg.self)
	if cfg.archive != nil {
		if err := tp.startKeeper(); err != nil {
			_ = tp.Close()
			return nil, err
		}
	}
	return tp, nil
}

// SetSelf replaces the description of the local agent that broadcast
// filters are checked against (for example after its capabilities change).
func (tp *Topics) SetSelf(s Self) { tp.self.Store(&s) }

// Close cancels subscriptions, closes topics, stops the router and waits
// for its goroutines.
func (tp *Topics) Close() error {
	tp.mu.Lock()
	if tp.closed {
		tp.mu.Unlock()
		return nil
	}
	tp.closed = true
	fams := tp.families
	tp.families = nil
	durables := tp.durables
	tp.durables = nil
	tp.mu.Unlock()
	// Durable subscriptions save their positions before the router stops.
	for _, d := range durables {
		d.Cancel()
	}
	if tp.keeper != nil {
		tp.keeper.close()
	}
	for name, f := range fams {
		for s := range f.subs {
			s.stop()
		}
		if f.sub != nil {
			f.sub.Cancel()
		}
		_ = tp.ps.UnregisterTopicValidator(GossipPrefix + name)
		_ = f.topic.Close()
	}
	tp.cancel()
	tp.wg.Wait()
	return nil
}

// join returns the family for a GossipSub topic, joining it; tp.mu held.
func (tp *Topics) join(name string) (*family, error) {
	if tp.closed {
		return nil, ErrClosed
	}
	if f := tp.families[name]; f != nil {
		return f, nil
	}
	gt := GossipPrefix + name
	if err := tp.ps.RegisterTopicValidator(gt, func(_ context.Context, from peer.ID, m *libp2ppubsub.Message) libp2ppubsub.ValidationResult {
		var (
			e   *protocol.Envelope
			res libp2ppubsub.ValidationResult
			why string
		)
		if own, ok := m.ValidatorData.(*ownMessage); ok && from == tp.h.ID() {
			// Left in ValidatorData: it carries the flood decision to the
			// router (see floodSwitch) and the envelope to subscribers.
			res, why = tp.validateOwn(own, time.Now())
		} else {
			e, res, why = tp.validate(name, m.GetData(), time.Now())
		}
		switch {
		case res == libp2ppubsub.ValidationAccept && e == nil:
		case res == libp2ppubsub.ValidationAccept:
			m.ValidatorData = e
		default:
			m.ValidatorData = why // for the metrics' tracer
		}
		return res
	}); err != nil {
		return nil, fmt.Errorf("pubsub: validator %s: %w", gt, err)
	}
	t, err := tp.ps.Join(gt)
	if err != nil {
		_ = tp.ps.UnregisterTopicValidator(gt)
		return nil, fmt.Errorf("pubsub: join %s: %w", gt, err)
	}
	f := &family{topic: t, subs: map[*Subscription]struct{}{}}
	tp.families[name] = f
	return f, nil
}

// Peers returns the peers known to be subscribed to the GossipSub topic of
// a bus topic (none if this node has not joined it).
func (tp *Topics) Peers(topic string) []peer.ID {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if f := tp.families[Family(topic)]; f != nil {
		return f.topic.ListPeers()
	}
	return nil
}

// MeshPeers returns how many GossipSub mesh peers the topic's family has
// on this node: the peers it forwards received messages to. It is
// non-zero only while this node subscribes to the family.
func (tp *Topics) MeshPeers(topic string) int { return tp.mesh.count(GossipTopic(topic)) }

// PublishOption configures one Publish.
type PublishOption func(*publishConfig)

type publishConfig struct {
	filter *Filter
	wait   time.Duration
	min    int
	id     string
}

// WithFilter attaches a seed 004 broadcast filter.
func WithFilter(f Filter) PublishOption { return func(c *publishConfig) { c.filter = &f } }

// WithWait overrides the publish wait (WithPublishWait) for one publish.
func WithWait(d time.Duration) PublishOption { return func(c *publishConfig) { c.wait = d } }

// WithAtLeast overrides the minimum number of receivers (topic peers and
// local subscriptions) for one publish.
func WithAtLeast(n int) PublishOption { return func(c *publishConfig) { c.min = n } }

// WithID publishes under envelope id id instead of a fresh random one, so
// that a publisher that also subscribes recognises its own message when it
// comes back. id must be unique to the message (protocol.NewID makes one):
// receivers drop an (author, id) pair they have seen.
func WithID(id string) PublishOption { return func(c *publishConfig) { c.id = id } }

// Publish seals payload in a notify envelope for topic and publishes it to
// topic peers and to this node's own subscriptions that match topic (and
// that the filter admits), and returns how many of both it went to (with
// WithID, SubscribeOwn subscriptions are not counted). It
// waits (see WithPublishWait, WithAtLeast) only while there are fewer
// than that many; with none it fails with ErrNoPeers.
func (tp *Topics) Publish(ctx context.Context, topic string, payload json.RawMessage, opts ...PublishOption) (int, error) {
	pc := publishConfig{wait: tp.cfg.wait, min: tp.cfg.minPeers}
	for _, o := range opts {
		o(&pc)
	}
	if topic == "" || hasWild(topic) {
		return 0, fmt.Errorf("%w: cannot publish to %q", ErrPattern, topic)
	}
	if len(pc.id) > protocol.MaxIDLen {
		return 0, fmt.Errorf("pubsub: message id of %d bytes exceeds %d", len(pc.id), protocol.MaxIDLen)
	}
	e, err := protocol.NewEnvelope(protocol.TypeNotify, &protocol.Recipient{Broadcast: true, Topic: topic}, payload)
	if err != nil {
		return 0, err
	}
	if pc.id != "" {
		e.ID = pc.id
	}
	if pc.filter != nil {
		md, err := protocol.MarshalCanonical(metadata{Filter: pc.filter})
		if err != nil {
			return 0, err
		}
		e.Metadata = md
	}
	body, sig, err := protocol.Seal(tp.signer, e)
	if err != nil {
		return 0, err
	}
	data := make([]byte, 0, len(sig)+len(body))
	data = append(append(data, sig...), body...)
	if len(data) > tp.cfg.maxSize {
		return 0, fmt.Errorf("pubsub: message of %d bytes exceeds %d", len(data), tp.cfg.maxSize)
	}
	tp.mu.Lock()
	f, err := tp.join(Family(topic))
	tp.mu.Unlock()
	if err != nil {
		return 0, err
	}
	// A publisher's own subscription ends the wait (its publisher has
	// delivered the message itself: waiting for peers would only delay
	// its mesh copy) but is no receiver.
	local := func() int {
		counted, own := tp.localSubs(f, topic, pc.filter, pc.id != "")
		return counted + own
	}
	peers, _, err := tp.waitPeers(ctx, f.topic, pc.min, pc.wait, local)
	if err != nil {
		return 0, fmt.Errorf("%w for %s after %s: %w", ErrNoPeers, GossipTopic(topic), pc.wait, err)
	}
	counted, _ := tp.localSubs(f, topic, pc.filter, pc.id != "")
	n := peers + counted
	if n < 1 {
		return 0, fmt.Errorf("%w for %s after %s", ErrNoPeers, GossipTopic(topic), pc.wait)
	}
	own := &ownMessage{e: e, flood: tp.floodNeeded(f, peers)}
	if err := f.topic.Publish(ctx, data, libp2ppubsub.WithValidatorData(own)); err != nil {
		return 0, fmt.Errorf("pubsub: publish %s: %w", topic, err)
	}
	tp.met.publish(Family(topic))
	return n, nil
}

// lookupEvery spaces the directory lookups of one waiting Publish.
const lookupEvery = 500 * time.Millisecond

// errWaitOver ends a Publish's wait for topic peers: not an error, the
// count then is the answer.
var errWaitOver = errors.New("pubsub: publish wait over")

// localSubs counts this node's subscriptions that a message on topic
// under filter reaches: GossipSub delivers a node's own messages to its own
// subscriptions. A history keeper's subscription is no receiver; for a
// message published WithID (withID), a SubscribeOwn subscription is
// counted apart, in own: its publisher drops its own copy.
func (tp *Topics) localSubs(f *family, topic string, filter *Filter, withID bool) (counted, own int) {
	if filter != nil {
		self := tp.self.Load()
		if !filter.Admits(self.AgentID, self.PersonaType, self.Capabilities) {
			return 0, 0
		}
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	for s := range f.subs {
		switch {
		case s.keeper || !s.matches(topic):
		case withID && s.own:
			own++
		default:
			counted++
		}
	}
	return counted, own
}

// waitPeers waits until topic peers plus local subscriptions reach min,
// or wait passes, and returns the topic peers connected and that sum. It counts again when something
// may have changed the sum, never on a timer: a peer joins the topic
// (the router's topic events), a peer connects (a peer the router still
// lists while its connection closes is not counted, see connected), the
// router opens its stream to a peer (it lists a peer whose subscription
// came first only from then on), a local subscription is added, or a
// directory lookup ends.
func (tp *Topics) waitPeers(ctx context.Context, t *libp2ppubsub.Topic, min int, wait time.Duration, local func() int) (peers, n int, err error) {
	peers = tp.connected(t.ListPeers())
	n = peers + local()
	if n >= min && n > 0 || wait <= 0 {
		return peers, n, nil
	}
	ctx, cancel := context.WithTimeoutCause(ctx, wait, errWaitOver)
	defer cancel() // ends the event pumps and a lookup still running
	changed, stop, err := tp.peerChanges(ctx, t)
	if err != nil {
		return peers, n, err
	}
	defer stop()
	var (
		lookup     <-chan struct{}
		lookupNext = time.NewTimer(0)
	)
	defer lookupNext.Stop()
	if tp.cfg.disc == nil {
		lookupNext.Stop()
	}
	for {
		added, streamed := tp.localAdded(), tp.mesh.nextStream()
		peers = tp.connected(t.ListPeers())
		if n = peers + local(); n >= min && n > 0 {
			return peers, n, nil
		}
		select {
		case <-changed:
		case <-added:
		case <-streamed:
		case <-lookupNext.C:
			lookup = tp.findTopicPeers(ctx, t.String())
		case <-lookup:
			lookup = nil
			lookupNext.Reset(lookupEvery)
		case <-tp.ctx.Done():
			return peers, n, ErrClosed
		case <-ctx.Done():
			if context.Cause(ctx) == errWaitOver {
				return peers, n, nil
			}
			return peers, n, ctx.Err()
		}
	}
}

// peerChanges signals (coalesced) when a peer joins topic t or a peer
// connects, until stop; stop returns once its goroutine has.
func (tp *Topics) peerChanges(ctx context.Context, t *libp2ppubsub.Topic) (<-chan struct{}, func(), error) {
	evts, err := t.EventHandler()
	if err != nil {
		return nil, nil, fmt.Errorf("pubsub: topic events %s: %w", t.String(), err)
	}
	conns, err := tp.h.EventBus().Subscribe(new(event.EvtPeerConnectednessChanged))
	if err != nil {
		evts.Cancel()
		return nil, nil, fmt.Errorf("pubsub: connection events: %w", err)
	}
	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			ev, err := evts.NextPeerEvent(ctx)
			if err != nil {
				return
			}
			if ev.Type == libp2ppubsub.PeerJoin {
				signal()
			}
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-conns.Out():
				if !ok {
					return
				}
				if e.(event.EvtPeerConnectednessChanged).Connectedness == network.Connected {
					signal()
				}
			}
		}
	})
	stop := func() {
		cancel()
		wg.Wait()
		evts.Cancel()
		_ = conns.Close()
	}
	return changed, stop, nil
}

// localAdded returns a channel closed when a local subscription is next
// added.
func (tp *Topics) localAdded() <-chan struct{} {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return tp.added
}

// connected counts the peers that are connected now. The router learns of
// a closed connection a moment after it closes, and until then still lists
// the peer in the topic: a message published to it then is lost.
func (tp *Topics) connected(peers []peer.ID) int {
	n := 0
	for _, p := range peers {
		if tp.h.Network().Connectedness(p) == network.Connected {
			n++
		}
	}
	return n
}

// discoveryNamespace is the namespace go-libp2p-pubsub advertises a topic
// under through WithDiscovery (its pubSubDiscovery adds "floodsub:"), so
// that Publish looks up the same records subscribers provide.
func discoveryNamespace(gossipTopic string) string { return "floodsub:" + gossipTopic }

// findTopicPeers looks up subscribers of a GossipSub topic in the
// directory and connects to them; the channel closes when it is done.
func (tp *Topics) findTopicPeers(ctx context.Context, gossipTopic string) <-chan struct{} {
	done := make(chan struct{})
	tp.mu.Lock()
	if tp.closed {
		tp.mu.Unlock()
		close(done)
		return done
	}
	tp.wg.Add(1) // under mu, so never after Close has begun to wait
	tp.mu.Unlock()
	go func() {
		defer tp.wg.Done()
		defer close(done)
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		found, err := tp.cfg.disc.FindPeers(ctx, discoveryNamespace(gossipTopic))
		if err != nil {
			return
		}
		var wg sync.WaitGroup
		for ai := range found {
			if ai.ID == tp.h.ID() || len(ai.Addrs) == 0 && len(tp.h.Peerstore().Addrs(ai.ID)) == 0 {
				continue
			}
			wg.Go(func() { _ = tp.h.Connect(ctx, ai) })
		}
		wg.Wait()
	}()
	return done
}

// track adds n goroutines to tp.wg unless tp is closed.
func (tp *Topics) track(n int) bool {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if tp.closed {
		return false
	}
	tp.wg.Add(n)
	return true
}
