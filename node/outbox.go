package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// Store and forward: a message to an agent that cannot be reached waits in
// the node's outbox, a queue of its own in the store (fsync'd before the
// sender hears "queued"), and goes out when the agent is seen again: a
// hello or a heartbeat from it makes its messages due at once, and
// between those one loop retries with a backoff that grows with the
// message's age, looking the agent up in the directory, so that an agent
// back at new addresses is found without hearing from it. The loop sleeps
// until the next message is due or it is woken; it never polls. Past the
// TTL a message is a dead letter (topic agent.messages.dlq for direct
// messages, agent:<id> for the bus's), listable and replayable.

// outboxQueue is the store queue of the node's outbox.
const outboxQueue = "node"

// Outbox defaults. A message waits at most DefaultMessageTTL (seed 004:
// seven days); the outbox holds at most DefaultOutboxPerRecipient messages
// for one agent and DefaultOutboxBytes in all, and refuses more with
// ErrOutboxFull rather than dropping anything.
const (
	DefaultMessageTTL         = 7 * 24 * time.Hour
	DefaultOutboxPerRecipient = 1000
	DefaultOutboxBytes        = 64 << 20
	// DefaultOutboxRetry is the longest wait between two attempts at an
	// agent that is away (and lookups of it in the directory).
	DefaultOutboxRetry = time.Minute
)

// Outbox pacing.
const (
	// outboxRetryMin is the first wait after an attempt found the agent
	// away; the wait then grows with the message's age.
	outboxRetryMin = time.Second
	// outboxBatch bounds the messages one pass takes.
	outboxBatch = 256
	// outboxParallel bounds the agents one pass tries at once.
	outboxParallel = 16
	// lookupTimeout bounds a directory lookup of an agent that is away.
	lookupTimeout = 10 * time.Second
)

// outboxMeta is the metadata of an outbox entry: the capability its
// payload is the params of.
type outboxMeta struct {
	Action string `json:"action"`
	// Mailboxes are the recipient's mailboxes known when the message was
	// queued, so that a restarted node can still hand it over.
	Mailboxes []string `json:"mailboxes,omitempty"`
}

// outbox is the node's store-and-forward part, under its own lock: the
// agents something waits for, so that a hello or heartbeat from any other
// agent costs no store read.
type outbox struct {
	st   *store.Store
	kick chan struct{}
	// attempts counts delivery attempts (tests).
	attempts atomic.Uint64

	mu      sync.Mutex
	waiting map[peer.ID]bool
	// depositing counts the deposits in flight per entry id: such an
	// entry is not delivered directly meanwhile (see depositUnsure).
	depositing map[string]int
}

// startOutbox loads the agents something waits for and starts the loop,
// whose first pass delivers what a restart found due.
func (n *Node) startOutbox() error {
	ob := &outbox{st: n.cfg.Store, kick: make(chan struct{}, 1), waiting: map[peer.ID]bool{}, depositing: map[string]int{}}
	u, err := ob.st.QueueUsage(n.ctx, outboxQueue)
	if err != nil {
		return fmt.Errorf("node: outbox: %w", err)
	}
	for _, to := range u.Recipients {
		if p, err := peer.Decode(to); err == nil {
			ob.waiting[p] = true
		}
	}
	n.outbox = ob
	n.wg.Go(n.outboxLoop)
	if len(u.Recipients) > 0 {
		n.log.Info("outbox: messages wait for agents", "agents", len(u.Recipients), "bytes", u.Bytes)
	}
	return nil
}

func (ob *outbox) wake() {
	select {
	case ob.kick <- struct{}{}:
	default:
	}
}

// seen is told that agent p was heard from (a hello, or a heartbeat with
// the addresses it gives): what waits for it is due now.
func (n *Node) seen(p peer.ID, addrs ...string) {
	ob := n.outbox
	if ob == nil {
		return
	}
	ob.mu.Lock()
	waiting := ob.waiting[p]
	ob.mu.Unlock()
	if !waiting {
		return
	}
	// A heartbeat heard through the mesh may be all this node knows of
	// where the agent is now; it signed them.
	for _, a := range addrs {
		if m, err := ma.NewMultiaddr(a); err == nil {
			n.host.Peerstore().AddAddr(p, m, peerstore.TempAddrTTL)
		}
	}
	// The wake writes to the store: not on the hello's or the topic's
	// goroutine.
	n.goTracked(func() {
		moved, err := ob.st.WakeIn(n.ctx, outboxQueue, p.String(), n.cfg.Now())
		if err != nil {
			if n.ctx.Err() == nil {
				n.log.Warn("outbox not woken", "remote_peer", p, "err", err)
			}
			return
		}
		if moved > 0 {
			n.log.Debug("outbox: agent back; its messages are due", "remote_peer", p, "messages", moved)
			ob.wake()
		}
	})
}

// Forward queues a call of action, with params, to agent to in the node's
// outbox under id (made up when empty), on disk before it returns, and
// returns when it expires. When the agent names mailboxes, the call is
// deposited in one of them at once, as the signed request it would have
// been, and leaves the outbox (as SendMessage's direct messages do);
// otherwise, or when no mailbox takes it, the outbox delivers it when the
// agent is seen again and dead-letters it (topic agent:<id>) past the TTL
// or on a refusal. A node without a store returns ErrNoStore; a full
// outbox, ErrOutboxFull. The bus forwards agent:<id> messages to an agent
// that is away through it. The response, when one comes, is logged and
// dropped: nobody waits for it.
func (n *Node) Forward(ctx context.Context, id, to, action string, params json.RawMessage) (time.Time, error) {
	pid, err := sign.ParseAgentID(to)
	if err != nil {
		return time.Time{}, protocol.Errorf(protocol.CodeInvalidMessage, "target agent: %v", err)
	}
	if action == "" {
		return time.Time{}, protocol.Errorf(protocol.CodeInvalidMessage, "a capability (action) is required")
	}
	if id == "" {
		id = protocol.NewID()
	}
	q, err := n.queue(ctx, store.Message{ID: id, Topic: "agent:" + pid.String(), To: pid.String(), Payload: params}, action, "")
	if err != nil {
		return time.Time{}, err
	}
	return q.Expires, nil
}

// queued is where queue left a message: in the outbox until Expires, or,
// when Mailbox is set, handed over to the recipient's mailbox on that
// relay. MailboxErr says why no mailbox the recipient names took it.
type queued struct {
	Expires    time.Time
	Mailbox    peer.ID
	MailboxErr error
}

// queue puts m in the outbox (see enqueue) and, when its agent names
// mailboxes, hands it over to one at once: the agent may never be online
// with this node again. Queued even when the caller gives up now: it is
// told either way.
func (n *Node) queue(ctx context.Context, m store.Message, action, lastErr string) (queued, error) {
	ctx = context.WithoutCancel(ctx)
	expires, err := n.enqueue(ctx, m, action, lastErr)
	if err != nil {
		return queued{}, err
	}
	q := queued{Expires: expires}
	if p, err := peer.Decode(m.To); err == nil && len(n.mailboxesOf(p)) > 0 {
		m.Metadata, _ = json.Marshal(outboxMeta{Action: action})
		q.Mailbox, q.MailboxErr = n.handOver(ctx, m)
	}
	return q, nil
}

// outboxRequestID is the request id of an outbox entry's attempts and of
// its mailbox copy: the entry's id, so that the recipient runs it once
// however many ways it arrives (see taskTable.admit), unless the id cannot
// be one.
func outboxRequestID(id string) string {
	if id == "" || len(id) > protocol.MaxIDLen {
		return ""
	}
	return id
}

// enqueue puts m (its ID, Topic, To and Payload set) in the outbox, due
// after the first retry wait.
func (n *Node) enqueue(ctx context.Context, m store.Message, action, lastErr string) (time.Time, error) {
	ob := n.outbox
	if ob == nil {
		return time.Time{}, ErrNoStore
	}
	om := outboxMeta{Action: action}
	if p, err := peer.Decode(m.To); err == nil {
		om.Mailboxes = mailboxAddrs(n.mailboxesOf(p))
	}
	meta, err := json.Marshal(om)
	if err != nil {
		return time.Time{}, fmt.Errorf("node: outbox: %w", err)
	}
	now := n.cfg.Now()
	m.Queue, m.From, m.Metadata, m.LastError = outboxQueue, n.idStr, meta, lastErr
	m.Time, m.Expires, m.NextAttempt = now, now.Add(n.cfg.MessageTTL), now.Add(outboxRetryMin)
	err = ob.st.EnqueueWithin(ctx, m, n.cfg.OutboxBounds)
	switch {
	case errors.Is(err, store.ErrExists):
		// Sent again while it waits (or after it was dead-lettered): one
		// copy is enough, and the receiver would drop the second.
		return m.Expires, nil
	case errors.Is(err, store.ErrFull):
		return time.Time{}, fmt.Errorf("%w: %w", ErrOutboxFull, err)
	case err != nil:
		return time.Time{}, fmt.Errorf("node: outbox: %w", err)
	}
	if p, err := peer.Decode(m.To); err == nil {
		ob.mu.Lock()
		ob.waiting[p] = true
		ob.mu.Unlock()
	}
	ob.wake()
	return m.Expires, nil
}

// outboxLoop delivers the outbox: what is due, and what a restart found
// (the first pass runs at once).
func (n *Node) outboxLoop() {
	ob := n.outbox
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		replayed := ob.st.Signal(outboxQueue)
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		case <-ob.kick:
		case <-replayed:
		}
		due, err := ob.st.DueIn(n.ctx, outboxQueue, n.cfg.Now(), outboxBatch)
		if err != nil && n.ctx.Err() == nil {
			n.log.Warn("outbox unreadable", "err", err)
		}
		n.outboxPass(due)
		t.Stop()
		switch next, ok, err := ob.st.NextDueIn(n.ctx, outboxQueue); {
		case n.ctx.Err() != nil:
			return
		case len(due) == outboxBatch:
			t.Reset(0)
		case err != nil:
			n.log.Warn("outbox unreadable", "err", err)
			t.Reset(n.cfg.OutboxRetry)
		case ok:
			t.Reset(max(next.Sub(n.cfg.Now()), 0))
		}
	}
}

// outboxPass tries due messages, one goroutine per agent (at most
// outboxParallel at once), each agent's in queue order.
func (n *Node) outboxPass(due []store.Message) {
	var order []string
	by := map[string][]store.Message{}
	for _, m := range due {
		if by[m.To] == nil {
			order = append(order, m.To)
		}
		by[m.To] = append(by[m.To], m)
	}
	sem := make(chan struct{}, outboxParallel)
	var wg sync.WaitGroup
	for _, to := range order {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			n.forwardTo(to, by[to])
		})
	}
	wg.Wait()
}

// forwardTo tries ms, all addressed to agent to, in queue order. Once one
// finds the agent away, no other is tried in this pass: the rest go to
// the agent's mailbox while one takes them, and whatever is left for the
// agent, due or not, waits for one next attempt, moved in one commit
// (postponeAgent). So an agent that is away costs its senders one attempt
// and one commit per backoff step, however many messages wait for it.
func (n *Node) forwardTo(to string, ms []store.Message) {
	looked, mailboxless := false, false
	var away error
	oldest := time.Time{}
	for _, m := range ms {
		if n.ctx.Err() != nil {
			return
		}
		now := n.cfg.Now()
		if !m.Expires.IsZero() && !now.Before(m.Expires) {
			n.deadLetterOutbox(m, fmt.Sprintf("TTL expired: agent %s not reached since %s (%s)", to, m.Time.UTC().Format(time.RFC3339), m.LastError))
			continue
		}
		if unsure, inFlight := n.depositUnsure(m); unsure {
			// Never delivered directly (see markDepositUnsure); deposited
			// again unless a mailbox already failed this pass.
			handed := false
			if !inFlight && !mailboxless {
				handed = n.tryHandOver(m)
				mailboxless = !handed
			}
			if !handed {
				n.postpone(m, now, errDepositUnsure)
			}
			continue
		}
		if away == nil {
			err := n.forwardOne(m)
			if errors.Is(err, errAway) && protocol.CodeOf(err) == protocol.CodeUnknownAgent && !looked {
				// The agent may be back at new addresses: ask the
				// directory, once per pass, and try again (not when it
				// was reached, without a handler yet).
				looked = true
				if n.lookUp(to) {
					err = n.forwardOne(m)
				}
			}
			if !errors.Is(err, errAway) {
				n.settle(m, now, err)
				continue
			}
			away = err
		}
		if !mailboxless && n.tryHandOver(m) {
			continue
		}
		mailboxless = true
		if oldest.IsZero() || m.Time.Before(oldest) {
			oldest = m.Time
		}
	}
	if away != nil && mailboxless && n.ctx.Err() == nil {
		n.postponeAgent(to, oldest, away)
	}
}

// postponeAgent moves the next attempt of every message waiting for agent
// to, in one commit: the wait grows with the age of the oldest (half of
// it), from outboxRetryMin to OutboxRetry, and never passes a message's
// expiry.
func (n *Node) postponeAgent(to string, oldest time.Time, why error) {
	now := n.cfg.Now()
	wait := min(max(now.Sub(oldest)/2, outboxRetryMin), n.cfg.OutboxRetry)
	if _, err := n.outbox.st.PostponeFor(n.ctx, outboxQueue, to, why.Error(), now.Add(wait), now.Add(n.cfg.MessageTTL)); err != nil && n.ctx.Err() == nil {
		n.log.Warn("outbox not updated", "remote_peer", to, "err", err)
	}
}

// errAway marks an attempt that found the agent unreachable, or without
// a handler for its messages yet: a wait, not a failed delivery.
var errAway = errors.New("agent away")

// forwardOne makes one attempt at m.
func (n *Node) forwardOne(m store.Message) error {
	n.outbox.attempts.Add(1)
	var meta outboxMeta
	if err := json.Unmarshal(m.Metadata, &meta); err != nil || meta.Action == "" {
		return protocol.Errorf(protocol.CodeInvalidMessage, "outbox entry without an action")
	}
	resp, err := n.Call(n.ctx, protocol.CallRequest{To: m.To, Action: meta.Action, Params: m.Payload, CorrelationID: outboxRequestID(m.ID)})
	if err == nil {
		n.log.Debug("outbox: delivered", "remote_peer", m.To, "id", m.ID, "action", meta.Action, "status", resp.Status, "response", compact(resp.Result))
		return nil
	}
	if queueable(err) {
		return fmt.Errorf("%w: %w", errAway, err)
	}
	return err
}

// settle records the outcome of an attempt at m.
func (n *Node) settle(m store.Message, now time.Time, err error) {
	ctx := n.ctx
	switch {
	case err == nil:
		if err := n.outbox.st.Delivered(ctx, m.ID); err != nil && !errors.Is(err, store.ErrNotFound) && ctx.Err() == nil {
			n.log.Warn("outbox not updated", "id", m.ID, "err", err)
		}
		n.forgetIfEmpty(m.To)
	case ctx.Err() != nil:
	case errors.Is(err, errAway):
		n.postpone(m, now, err)
	case refused(err):
		n.deadLetterOutbox(m, "refused: "+err.Error())
	case m.Attempts+1 >= MessageAttempts:
		m.Attempts++
		n.deadLetterOutbox(m, fmt.Sprintf("gave up after %d attempts: %v", m.Attempts, err))
	default:
		next := now.Add(n.cfg.MessageBackoff << m.Attempts)
		if err := n.outbox.st.Retry(ctx, m.ID, err.Error(), next); err != nil && ctx.Err() == nil {
			n.log.Warn("outbox not updated", "id", m.ID, "err", err)
		}
	}
}

// postpone moves m's next attempt without counting one: the wait grows
// with m's age (half of it), from outboxRetryMin to OutboxRetry, and
// never passes its expiry.
func (n *Node) postpone(m store.Message, now time.Time, why error) {
	wait := min(max(now.Sub(m.Time)/2, outboxRetryMin), n.cfg.OutboxRetry)
	next := now.Add(wait)
	if !m.Expires.IsZero() && next.After(m.Expires) {
		next = m.Expires
	}
	expires := m.Expires
	if expires.IsZero() { // replayed: a fresh TTL
		expires = now.Add(n.cfg.MessageTTL)
	}
	if err := n.outbox.st.Postpone(n.ctx, m.ID, why.Error(), next, expires); err != nil && !errors.Is(err, store.ErrNotFound) && n.ctx.Err() == nil {
		n.log.Warn("outbox not updated", "id", m.ID, "err", err)
	}
}

// deadLetterOutbox moves m to the dead-letter queue: a direct message
// under MessageDLQTopic, as SendMessage's own dead letters.
func (n *Node) deadLetterOutbox(m store.Message, reason string) {
	var meta outboxMeta
	if json.Unmarshal(m.Metadata, &meta) == nil && meta.Action == protocol.MessageCapability {
		m.Topic = MessageDLQTopic
	}
	if err := n.outbox.st.DeadLetter(n.ctx, m, reason); err != nil {
		if n.ctx.Err() == nil {
			n.log.Warn("outbox: dead letter not stored", "id", m.ID, "err", err)
		}
		return
	}
	n.log.Warn("outbox: message dead-lettered", "remote_peer", m.To, "id", m.ID, "reason", reason)
	n.forgetIfEmpty(m.To)
}

// forgetIfEmpty drops to from the agents something waits for once nothing
// does. It counts under the lock, so an enqueue for to that commits
// meanwhile keeps it.
func (n *Node) forgetIfEmpty(to string) {
	p, err := peer.Decode(to)
	if err != nil {
		return
	}
	ob := n.outbox
	ob.mu.Lock()
	defer ob.mu.Unlock()
	if c, err := ob.st.CountFor(n.ctx, outboxQueue, to); err == nil && c == 0 {
		delete(ob.waiting, p)
	}
}

// lookUp asks the directory for agent to's addresses, and reports whether
// it found any.
func (n *Node) lookUp(to string) bool {
	if n.dir == nil {
		return false
	}
	p, err := peer.Decode(to)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(n.ctx, lookupTimeout)
	defer cancel()
	ai, err := n.dir.Kad().FindPeer(ctx, p)
	if err != nil || len(ai.Addrs) == 0 {
		return false
	}
	n.host.Peerstore().AddAddrs(p, ai.Addrs, peerstore.TempAddrTTL)
	return true
}

// queueable reports whether a failed attempt means the agent is away:
// unreachable, or reached but without a handler for the capability yet
// (its program has not reconnected to its node).
func queueable(err error) bool {
	switch protocol.CodeOf(err) {
	case protocol.CodeUnknownAgent, protocol.CodeCapabilityNotSupported:
		return true
	}
	return false
}

// refused reports whether the agent was reached and refused the message
// for good: a retry cannot change the answer.
func refused(err error) bool {
	switch protocol.CodeOf(err) {
	case protocol.CodeUnauthorized, protocol.CodeInvalidMessage, protocol.CodeInvalidSignature:
		return true
	}
	return false
}

func compact(raw json.RawMessage) string {
	if len(raw) > 256 {
		return string(raw[:256]) + "…"
	}
	return string(raw)
}
