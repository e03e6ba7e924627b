package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/mailbox"
	"github.com/meshagent/meshagent/metrics"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// Mailboxes: an agent names relays (WithMailboxes) in its signed hello.
// A sender whose direct message, or forwarded call (Forward: a bus
// message to agent:<id>), finds the agent away queues it in its outbox as
// always, and at once (not after more attempts: the agent may never be
// online with it again) deposits the signed request it would have sent
// in one of those mailboxes; once one took it, the outbox entry is handed
// over (deleted), so that the sender's retries do not deliver it a second
// time. A mailbox that is full, or a relay out of reach, leaves the
// message in the outbox, and a later pass tries the mailboxes again. The
// agent fetches from its mailboxes when it starts, whenever it connects
// to one of them, when its services or message handler change, and every
// OutboxRetry as a safety net (a sender that lost its way to the agent
// while it was online deposits too), verifies each envelope itself
// (signature, addressed to it, within the TTL), runs it as it runs a live
// request (the policy's limits, then run: ACL, policy, schemas; once per
// requester and request id, as the outbox's direct attempts use the same
// id; agent.message deduplicated by message id), and acknowledges it. A
// request that found no handler yet (its program has not attached it) or
// came past a rate limit stays in the mailbox for the next fetch; so does
// a direct message whose handler failed, as its sender would have retried
// it. Those it defers: the relay keeps them while the mailbox has room,
// and lets a new deposit take their place when it is full and they were
// deferred long enough (an attacker's flood of requests for capabilities
// the agent never serves is such). The answer has nobody waiting for it
// and is logged. The mailboxes of other agents are kept apart from their
// hellos: a hello is forgotten when the agent is long gone, which is when
// its mailboxes matter.

// Mailbox pacing.
const (
	// mailboxRetryMin is the first wait after a mailbox could not be
	// read; the wait doubles up to OutboxRetry.
	mailboxRetryMin = time.Second
	// depositTimeout bounds a deposit in one mailbox.
	depositTimeout = 10 * time.Second
)

// mailboxes is the node's mailbox part, under its own lock: this agent's
// relays, the mailboxes other agents announced, and, on a relay, the
// service.
type mailboxes struct {
	own    []peer.AddrInfo
	addrs  []string // own, as announced in hello
	client *mailbox.Client
	server *mailbox.Server // nil unless WithMailboxService
	kick   chan struct{}

	mu     sync.Mutex
	others map[peer.ID][]peer.AddrInfo
}

// validateMailboxes checks WithMailboxes' addresses.
func validateMailboxes(addrs []ma.Multiaddr) error {
	if len(addrs) > protocol.MaxMailboxes {
		return fmt.Errorf("node: %d mailboxes, at most %d", len(addrs), protocol.MaxMailboxes)
	}
	for _, a := range addrs {
		if _, err := peer.AddrInfoFromP2pAddr(a); err != nil {
			return fmt.Errorf("node: mailbox %s must end in /p2p/<relay id>: %w", a, err)
		}
		if len(a.String()) > protocol.MaxMailboxAddrLen {
			return fmt.Errorf("node: mailbox address longer than %d bytes", protocol.MaxMailboxAddrLen)
		}
	}
	return nil
}

// newMailboxes builds the mailbox part, before the node answers hellos,
// which announce this agent's mailboxes and record others'.
func (n *Node) newMailboxes() *mailboxes {
	mb := &mailboxes{
		client: &mailbox.Client{Host: n.host, IOTimeout: n.cfg.Limits.IOTimeout},
		kick:   make(chan struct{}, 1),
		others: map[peer.ID][]peer.AddrInfo{},
	}
	for _, a := range n.cfg.Mailboxes {
		ai, _ := peer.AddrInfoFromP2pAddr(a) // checked by Validate
		mb.own = append(mb.own, *ai)
		mb.addrs = append(mb.addrs, a.String())
		n.host.Peerstore().AddAddrs(ai.ID, ai.Addrs, peerstore.PermanentAddrTTL)
	}
	n.guard.protectAddrs(tagRelay, n.cfg.Mailboxes)
	return mb
}

// startMailboxes starts the mailbox service on a relay, and the loop
// fetching this agent's mailboxes when it names some.
func (n *Node) startMailboxes() error {
	mb := n.mailboxes
	if n.cfg.MailboxService {
		opts := append([]mailbox.Option{mailbox.WithLogger(n.log), mailbox.WithClock(n.cfg.Now), mailbox.WithIOTimeout(n.cfg.Limits.IOTimeout)}, n.cfg.MailboxOptions...)
		srv, err := mailbox.NewServer(n.host, n.cfg.Store, opts...)
		if err != nil {
			return fmt.Errorf("node: %w", err)
		}
		mb.server = srv
		if err := n.cfg.Metrics.CounterFunc("meshagent_mailbox_displaced_total",
			"Items agents had deferred (no handler for them) that deposits to their full mailboxes displaced.", func() float64 {
				return float64(srv.Displaced())
			}); err != nil {
			return fmt.Errorf("node: metrics: %w", err)
		}
	}
	if len(mb.own) > 0 {
		n.wg.Go(n.mailboxLoop)
	}
	return nil
}

func (mb *mailboxes) wake() {
	select {
	case mb.kick <- struct{}{}:
	default:
	}
}

// mailboxConnected is told that a connection to p completed identify:
// when p is one of this agent's mailboxes, read it now.
func (n *Node) mailboxConnected(p peer.ID) {
	mb := n.mailboxes
	if mb == nil {
		return
	}
	for _, r := range mb.own {
		if r.ID == p {
			mb.wake()
			return
		}
	}
}

// noteMailboxes records the mailboxes agent p announced in a hello it
// signed; unusable addresses are skipped.
func (n *Node) noteMailboxes(p peer.ID, addrs []string) {
	mb := n.mailboxes
	if mb == nil {
		return
	}
	ais := parseMailboxes(p, addrs)
	if mb.server != nil {
		for _, ai := range ais {
			if ai.ID == n.id {
				// p names this relay as its mailbox, in a hello or heartbeat
				// it signed: the relay holds mail for it from now on.
				if err := mb.server.Register(p); err != nil {
					n.log.Warn("mailbox: agent not registered", "agent", p, "err", err)
				}
				break
			}
		}
	}
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if len(ais) == 0 {
		delete(mb.others, p)
		return
	}
	if _, ok := mb.others[p]; !ok && len(mb.others) >= maxKnownPeers {
		for k := range mb.others { // any one: a bound, not a cache policy
			delete(mb.others, k)
			break
		}
	}
	mb.others[p] = ais
}

// mailboxesOf returns the mailboxes agent p announced.
func (n *Node) mailboxesOf(p peer.ID) []peer.AddrInfo {
	mb := n.mailboxes
	if mb == nil {
		return nil
	}
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return mb.others[p]
}

// mailboxAddrs returns ais as multiaddr strings ending in /p2p/<id>, the
// form hellos carry and outbox entries keep.
func mailboxAddrs(ais []peer.AddrInfo) []string {
	var out []string
	for _, ai := range ais {
		if ms, err := peer.AddrInfoToP2pAddrs(&ai); err == nil {
			for _, m := range ms {
				out = append(out, m.String())
			}
		}
	}
	return out
}

// parseMailboxes reads mailbox addresses (multiaddrs ending in
// /p2p/<relay id>) into one AddrInfo per relay, skipping unusable ones
// and self.
func parseMailboxes(self peer.ID, addrs []string) []peer.AddrInfo {
	var ms []ma.Multiaddr
	for _, a := range addrs {
		if m, err := ma.NewMultiaddr(a); err == nil {
			if ai, err := peer.AddrInfoFromP2pAddr(m); err == nil && ai.ID != self {
				ms = append(ms, m)
			}
		}
	}
	ais, _ := peer.AddrInfosFromP2pAddrs(ms...)
	return ais
}

// errNoMailbox marks an agent that announced no mailbox.
var errNoMailbox = errors.New("agent names no mailbox")

// handOver deposits the outbox entry m (a direct message or a forwarded
// call: its metadata names the capability) in a mailbox of its recipient,
// as the signed request it would have sent, and, once one took it,
// deletes the entry from the outbox. It returns the relay that took it.
func (n *Node) handOver(ctx context.Context, m store.Message) (peer.ID, error) {
	to, err := peer.Decode(m.To)
	if err != nil {
		return "", err
	}
	var meta outboxMeta
	if err := json.Unmarshal(m.Metadata, &meta); err != nil || meta.Action == "" {
		return "", protocol.Errorf(protocol.CodeInvalidMessage, "outbox entry without an action")
	}
	relays := n.mailboxesOf(to)
	if len(relays) == 0 {
		// Known when it was queued, before a restart of this node.
		relays = parseMailboxes(to, meta.Mailboxes)
	}
	if len(relays) == 0 {
		return "", errNoMailbox
	}
	params, err := canonicalParams(m.Payload)
	if err != nil {
		return "", err
	}
	// The request id is the outbox entry's, as in the outbox's own
	// attempts: the recipient runs it once however it gets there.
	doc, err := n.sealJSON(protocol.TypeRequest, m.To, &protocol.Request{Action: meta.Action, CorrelationID: outboxRequestID(m.ID), Params: params})
	if err != nil {
		return "", err
	}
	n.depositing(m.ID, 1)
	defer n.depositing(m.ID, -1)
	var errs []error
	for _, r := range relays {
		err := n.deposit(ctx, r, to, doc)
		if errors.Is(err, mailbox.ErrUnanswered) {
			n.markDepositUnsure(m)
		}
		if err == nil {
			if err := n.outbox.st.Delivered(context.WithoutCancel(ctx), m.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
				n.log.Warn("outbox not updated", "id", m.ID, "err", err)
			}
			n.forgetIfEmpty(m.To)
			n.log.Info("message handed over to a mailbox", "remote_peer", to, "message_id", m.ID, "action", meta.Action, "mailbox", r.ID)
			return r.ID, nil
		}
		errs = append(errs, fmt.Errorf("mailbox %s: %w", r.ID, err))
	}
	err = errors.Join(errs...)
	n.log.Warn("message kept in the outbox: no mailbox took it", "remote_peer", to, "message_id", m.ID, "err", err)
	return "", err
}

// Unsure deposits: a deposit sent without an answer (the relay died, or
// the answer was lost) may be in the mailbox. Were the outbox then to
// deliver the message directly, the agent could run it twice: it
// remembers across a restart only what it ran from a mailbox (and
// detached tasks), so after a restart it would run the mailbox copy
// again. Such an entry is marked in the store, and from then on goes
// only to mailboxes, where a second copy runs once; the mark lasts the
// message TTL, and a node keeps at most maxUnsureDeposits of them (past
// that an entry is delivered as any other, with the old risk).
const (
	unsureDepositScope = "outbox.unsure-deposit"
	maxUnsureDeposits  = 1 << 16
)

// errDepositUnsure is why an entry whose deposit may be in a mailbox waits
// for a mailbox rather than being delivered directly.
var errDepositUnsure = errors.New("a deposit of this message may be in a mailbox: it goes only to mailboxes")

// markDepositUnsure records that a deposit of outbox entry m may be in a
// mailbox.
func (n *Node) markDepositUnsure(m store.Message) {
	until := m.Expires
	if until.IsZero() {
		until = n.cfg.Now().Add(n.cfg.MessageTTL)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(n.ctx), n.cfg.Limits.IOTimeout)
	defer cancel()
	if err := n.outbox.st.Mark(ctx, unsureDepositScope, m.ID, until, maxUnsureDeposits); err != nil {
		n.log.Warn("outbox: a deposit that may be in a mailbox is not remembered; the message may run twice", "id", m.ID, "err", err)
	}
}

// depositing counts a deposit of outbox entry id starting (+1) or done (-1).
func (n *Node) depositing(id string, d int) {
	ob := n.outbox
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if ob.depositing[id] += d; ob.depositing[id] <= 0 {
		delete(ob.depositing, id)
	}
}

// depositUnsure reports whether a deposit of outbox entry m may be in a
// mailbox, and whether one is in flight (a relay that hangs holds it up to
// depositTimeout, past the outbox's first retry); otherwise, unsure means
// one was sent without an answer (markDepositUnsure).
func (n *Node) depositUnsure(m store.Message) (unsure, inFlight bool) {
	ob := n.outbox
	ob.mu.Lock()
	inFlight = ob.depositing[m.ID] > 0
	ob.mu.Unlock()
	if inFlight {
		return true, true
	}
	_, ok, err := n.outbox.st.Marked(n.ctx, unsureDepositScope, m.ID, n.cfg.Now())
	if err != nil && n.ctx.Err() == nil {
		n.log.Warn("outbox: unsure-deposit mark unreadable", "id", m.ID, "err", err)
	}
	return ok, false
}

// errNotAMailbox marks an agent that names this node as its mailbox when
// it serves none.
var errNotAMailbox = errors.New("this node serves no mailboxes")

// deposit leaves doc, a signed request for agent to, in its mailbox on
// relay r: over the mailbox protocol, or straight into the service when r
// is this node (a relay sending to an agent that names it).
func (n *Node) deposit(ctx context.Context, r peer.AddrInfo, to peer.ID, doc json.RawMessage) error {
	if r.ID == n.id {
		if n.mailboxes.server == nil {
			return errNotAMailbox
		}
		return n.mailboxes.server.Deposit(n.id, to, doc)
	}
	n.host.Peerstore().AddAddrs(r.ID, r.Addrs, peerstore.TempAddrTTL)
	if n.host.Network().Connectedness(r.ID) != network.Connected {
		// A relay that restarted is back at once: libp2p's dial backoff
		// (seconds, growing to minutes) from the dials that found it down
		// would refuse every deposit meanwhile, and the outbox paces its
		// own attempts.
		clearBackoff(n.host, r.ID)
	}
	ctx, cancel := context.WithTimeout(ctx, depositTimeout)
	defer cancel()
	return n.mailboxes.client.Deposit(ctx, r.ID, to, doc)
}

// tryHandOver hands an outbox entry found away over to a mailbox when its
// agent names one, and reports whether one took it.
func (n *Node) tryHandOver(m store.Message) bool {
	var meta outboxMeta
	if json.Unmarshal(m.Metadata, &meta) != nil {
		return false
	}
	if p, err := peer.Decode(m.To); err != nil || (len(n.mailboxesOf(p)) == 0 && len(meta.Mailboxes) == 0) {
		return false
	}
	_, err := n.handOver(n.ctx, m)
	return err == nil
}

// mailboxLoop reads this agent's mailboxes: at start, when woken (a
// connection to one), and every OutboxRetry; after a failure sooner,
// with a doubling wait. A round that ended with a mailbox still holding
// more (its page or time budget spent) is followed at once by another.
func (n *Node) mailboxLoop() {
	mb := n.mailboxes
	t := time.NewTimer(0)
	defer t.Stop()
	retry := mailboxRetryMin
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		case <-mb.kick:
		}
		failed, more := n.mailboxRound()
		t.Stop()
		switch {
		case failed:
			t.Reset(retry)
			retry = min(retry*2, n.cfg.OutboxRetry)
		case more:
			t.Reset(mailboxRetryMin)
			retry = mailboxRetryMin
		default:
			t.Reset(n.cfg.OutboxRetry)
			retry = mailboxRetryMin
		}
	}
}

// Bounds of one round of mailbox reads, per mailbox: a relay that answers
// "more" forever, or never moves its cursor, holds the agent no longer
// than this, and the other mailboxes are read in between (round robin, a
// page each in turn).
const (
	// mailboxRoundPages bounds the pages read from one mailbox in a round
	// (MaxPage items each: a full mailbox of the default bounds is 10).
	mailboxRoundPages = 20
	// mailboxRoundTime bounds the time spent on one mailbox in a round,
	// running what it holds included.
	mailboxRoundTime = time.Minute
)

// mailboxRead is one mailbox's state within a round.
type mailboxRead struct {
	relay peer.AddrInfo
	after string
	seen  map[string]bool // cursors this round has been given
	pages int
	spent time.Duration
	done  bool
	err   error
}

// mailboxRound reads this agent's mailboxes a page each in turn until
// every one is empty, failed, misbehaved (a page announcing more with no
// items, or a cursor already given this round) or spent its budget
// (mailboxRoundPages, mailboxRoundTime). It reports whether one failed,
// and whether one still holds more.
func (n *Node) mailboxRound() (failed, more bool) {
	mb := n.mailboxes
	reads := make([]*mailboxRead, len(mb.own))
	for i, r := range mb.own {
		reads[i] = &mailboxRead{relay: r, seen: map[string]bool{"": true}}
		if err := n.connectMailbox(r); err != nil {
			reads[i].done, reads[i].err = true, err
		}
	}
	for active := true; active && n.ctx.Err() == nil; {
		active = false
		for _, rd := range reads {
			if rd.done {
				continue
			}
			start := time.Now()
			next, err := n.mailboxPage(rd.relay, rd.after, mailboxRoundTime-rd.spent)
			rd.spent += time.Since(start)
			rd.pages++
			switch {
			case err != nil:
				rd.done, rd.err = true, err
			case next == nil:
				rd.done = true // empty
			case rd.seen[*next]:
				rd.done, rd.err = true, fmt.Errorf("%w: cursor %.40q given twice in a round", errMailboxMisbehaves, *next)
			case rd.pages >= mailboxRoundPages || rd.spent >= mailboxRoundTime:
				rd.done, more = true, true
			default:
				rd.seen[*next] = true
				rd.after = *next
				active = true
			}
		}
	}
	for _, rd := range reads {
		if rd.err != nil {
			failed = true
			if n.ctx.Err() == nil {
				n.log.Debug("mailbox not read", "mailbox", rd.relay.ID, "pages", rd.pages, "err", rd.err)
			}
		}
	}
	return failed, more
}

// errMailboxMisbehaves marks a mailbox whose answers make no progress.
var errMailboxMisbehaves = errors.New("mailbox makes no progress")

// connectMailbox connects to relay r unless connected.
func (n *Node) connectMailbox(r peer.AddrInfo) error {
	if n.host.Network().Connectedness(r.ID) == network.Connected {
		return nil
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Limits.IOTimeout)
	defer cancel()
	return n.host.Connect(ctx, r)
}

// mailboxPage fetches the page after cursor after from relay r, within
// budget, takes each envelope and acknowledges those taken. It returns
// the cursor of the next page, nil when the mailbox holds no more.
func (n *Node) mailboxPage(r peer.AddrInfo, after string, budget time.Duration) (*string, error) {
	mb := n.mailboxes
	ctx, cancel := context.WithTimeout(n.ctx, max(budget, time.Second))
	defer cancel()
	p, err := mb.client.Fetch(ctx, r.ID, after, 0)
	if err != nil {
		return nil, err
	}
	var done, later []string
	for _, it := range p.Items {
		if ctx.Err() != nil {
			break // the rest comes with the next round
		}
		switch {
		case n.takeFromMailbox(r.ID, it):
			done = append(done, it.ID)
		case !it.Deferred:
			later = append(later, it.ID)
		}
	}
	// Acks and defers are sent even past the budget: what ran must not
	// run again.
	actx, acancel := context.WithTimeout(n.ctx, n.cfg.Limits.IOTimeout)
	defer acancel()
	if len(done) > 0 {
		if err := mb.client.Ack(actx, r.ID, done); err != nil {
			return nil, err
		}
	}
	if len(later) > 0 {
		// They keep their place while the mailbox has room, and lose it
		// first when it is full (see the mailbox package doc). A relay
		// that predates defer refuses it: the items simply stay.
		if err := mb.client.Defer(actx, r.ID, later); err != nil && !errors.Is(err, mailbox.ErrRefused) {
			return nil, err
		}
	}
	switch {
	case !p.More:
		return nil, nil
	case len(p.Items) == 0:
		return nil, fmt.Errorf("%w: a page announcing more holds no item", errMailboxMisbehaves)
	case p.Next == after:
		return nil, fmt.Errorf("%w: cursor %.40q did not move", errMailboxMisbehaves, p.Next)
	}
	return &p.Next, nil
}

// takeFromMailbox verifies one envelope fetched from relay and runs it as
// a live request of its sender. It reports whether the envelope is done
// with: run, or refused for good (it will never verify, or the ACL, the
// policy or a schema refuses it); not when no handler is attached for it
// yet, past a rate limit of the policy, nor when a direct message's
// handler failed, so that the next fetch brings it again.
func (n *Node) takeFromMailbox(relay peer.ID, it mailbox.Item) bool {
	e, req, err := mailbox.Open(it.Envelope, n.id)
	if err != nil {
		if protocol.CodeOf(err) == protocol.CodeInvalidSignature {
			n.refused(metrics.RefusedSignature)
		} else {
			n.refused(metrics.RefusedInvalid)
		}
		n.log.Warn("mailbox envelope rejected", "mailbox", relay, "item", it.ID, "err", err)
		return true
	}
	from, _ := e.Sender() // Open checked it
	ts, _ := e.Time()
	now := n.cfg.Now()
	if now.Sub(ts) > n.cfg.MessageTTL || ts.After(now.Add(n.cfg.Limits.ReplayWindow)) {
		n.refused(metrics.RefusedReplay)
		n.log.Warn("mailbox envelope rejected", "mailbox", relay, "remote_peer", from, "err", "sent "+e.Timestamp+", outside the message TTL")
		return true
	}
	lg := n.log.With("mailbox", relay, "remote_peer", from, "action", req.Action, "correlation_id", req.CorrelationID)
	// The policy's limits, as for a request frame from the sender: a
	// request too large never will be taken; one past a rate waits for
	// the next fetch.
	size := len(it.Envelope)
	rule := n.policy.Load().rule(from)
	if err := rule.admitSize(size); err != nil {
		n.refused(metrics.RefusedPolicy)
		lg.Warn("mailbox request refused", "err", err)
		return true
	}
	who, err := n.requesterOf(e, from, size)
	if err == nil {
		err = rule.admitRate(from)
	}
	if err != nil {
		n.refused(metrics.RefusedPolicy)
		if protocol.CodeOf(err) == protocol.CodeRateLimited {
			lg.Info("mailbox request left for later", "err", err)
			return false
		}
		lg.Warn("mailbox request refused", "err", err)
		return true
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Limits.HandlerTimeout)
	// Nobody streams this request's progress: the handler's is kept in
	// its task only.
	res, err := n.run(ctx, cancel, who, who.agent.String(), req, relay, func(json.RawMessage) error { return nil }, &durableRun{})
	cancel()
	switch {
	case err == nil:
		// The answer has nobody waiting for it: its sender heard "queued".
		lg.Info("request taken from a mailbox", "response", compact(res))
		return true
	case refused(err):
		lg.Warn("mailbox request refused", "err", err)
		return true
	case protocol.CodeOf(err) == protocol.CodeRateLimited:
		// Its task could not be recorded (the task bounds): it did not
		// run, and the next fetch brings it again.
		lg.Info("mailbox request left for later", "err", err)
		return false
	case protocol.CodeOf(err) == protocol.CodeCapabilityNotSupported, errors.Is(err, ErrClosed), n.ctx.Err() != nil:
		// It did not start: no handler for it yet, or the node is closing.
		lg.Info("mailbox request left for later", "err", err)
		return false
	case req.Action == protocol.MessageCapability:
		// A direct message's failure is not remembered (receiveMessage):
		// its sender would retry it, and so does the next fetch.
		lg.Info("mailbox message left for later", "err", err)
		return false
	default:
		// The handler ran and failed: it ran once, as the request asks.
		lg.Warn("request taken from a mailbox failed", "err", err)
		return true
	}
}
