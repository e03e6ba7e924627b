package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/meshagent/meshagent/beadctx"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/pubsub"
)

// DefaultBeadResync is how often, by default, every followed bead
// catches up again from history keepers (Config.BeadResync).
const DefaultBeadResync = 10 * time.Second

// Catch-ups of bead contexts: every followed bead catches up again from
// history keepers every Config.BeadResync (anti-entropy: a patch lost live, to
// a full subscription queue, a partition, or a publish sent before the
// publisher knew of the other members, arrives then); a catch-up waits
// at most beadCatchUpWait (for a keeper to answer, or to appear when
// none is connected). A catch-up after the first fetches what was
// published since beadOverlap before the previous one began, so a bead's
// whole history is fetched once, not every round.
const (
	beadCatchUpWait = 3 * time.Second
	beadOverlap     = 2 * time.Minute
)

// beadContexts are the shared bead contexts this node follows (seed 004):
// for each, the document folded from the patches on the bead's topic
// (beadctx.Topic), at most beadctx.MaxBeads of them.
type beadContexts struct {
	clock  *beadctx.Clock
	resync time.Duration
	// dropLive makes the node ignore live patches (tests: only catch-ups
	// bring them).
	dropLive atomic.Bool

	mu      sync.Mutex // guards beads, each bead's doc and synced, and started
	beads   map[string]*bead
	started bool // the resync loop runs
}

type bead struct {
	id     string
	doc    *beadctx.Doc
	ready  chan struct{} // closed when joining ended; err says how
	err    error
	synced time.Time // when the last catch-up that found a keeper began
}

func newBeadContexts(now func() time.Time, resync time.Duration) *beadContexts {
	if resync <= 0 {
		resync = DefaultBeadResync
	}
	return &beadContexts{clock: beadctx.NewClock(now), resync: resync, beads: map[string]*bead{}}
}

// ContextGet returns the shared context of bead (seed 004). The first
// access to a bead makes this node follow it: it subscribes to the bead's
// topic and catches up from history keepers (other members started
// WithKeepHistory("beadctx:*"), relays), within ctx and at most 3 s;
// then it catches up again every Config.BeadResync (10 s by default), on
// a goroutine of the node's, until the node closes. A bead id is 1 to 128
// ASCII letters, digits, '.', '_' or '-' (INVALID_MESSAGE otherwise);
// past beadctx.MaxBeads beads followed, a new one is refused with
// RATE_LIMITED.
func (n *Node) ContextGet(ctx context.Context, beadID string) (*protocol.BeadContext, error) {
	b, err := n.followBead(ctx, beadID)
	if err != nil {
		return nil, err
	}
	return n.beadContext(b), nil
}

// ContextSet replaces bead's shared context with doc, a JSON object, and
// publishes the change to the bead's other members (see ContextPatch).
func (n *Node) ContextSet(ctx context.Context, beadID string, doc json.RawMessage, members []string) (*protocol.BeadContext, error) {
	return n.changeBead(ctx, beadID, beadctx.OpSet, doc, members)
}

// ContextPatch applies the RFC 7396 merge patch patch (a JSON object) to
// bead's shared context and publishes it, signed and stamped with this
// node's hybrid logical clock, on the bead's topic; every member applies
// the patches of a bead in (HLC, agent id) order, so all converge to the
// same document (see package beadctx). It answers the context with the
// patch applied. A patch whose result would exceed beadctx.MaxDocBytes
// is refused with INVALID_MESSAGE.
//
// Only a bead's members change it (see package beadctx, Members): the
// first change makes this agent a member with the agents members lists;
// a member's change replaces the members when members is not nil. When
// this agent is not a member of the bead as this node holds it, the
// change is refused with UNAUTHORIZED and nothing is published.
func (n *Node) ContextPatch(ctx context.Context, beadID string, patch json.RawMessage, members []string) (*protocol.BeadContext, error) {
	return n.changeBead(ctx, beadID, beadctx.OpPatch, patch, members)
}

func (n *Node) changeBead(ctx context.Context, beadID string, op beadctx.Op, value json.RawMessage, members []string) (*protocol.BeadContext, error) {
	b, err := n.followBead(ctx, beadID)
	if err != nil {
		return nil, err
	}
	p, err := beadctx.Patch{At: n.contexts.clock.Now(), Agent: n.idStr, Op: op, Value: value, Members: members}.Check()
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "%v", err)
	}
	n.contexts.mu.Lock()
	err = b.doc.Admit(p)
	n.contexts.mu.Unlock()
	switch {
	case errors.Is(err, beadctx.ErrNotMember):
		return nil, protocol.Errorf(protocol.CodeUnauthorized, "bead %s: this agent is not one of its members (only members change a bead; a member adds others with members)", beadID)
	case err != nil:
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "bead %s: %v", beadID, err)
	}
	payload, err := beadctx.EncodePayload(beadID, p)
	if err != nil {
		return nil, err
	}
	// This node's own subscription counts as a receiver, so a bead with
	// no other member online is not an error: they catch up later.
	if _, err := n.topics.Publish(ctx, beadctx.Topic(beadID), payload); err != nil {
		return nil, err
	}
	n.contexts.mu.Lock()
	_, err = b.doc.Add(p)
	n.contexts.mu.Unlock()
	if errors.Is(err, beadctx.ErrNotMember) {
		// A member list that arrived since Admit left this agent out.
		return nil, protocol.Errorf(protocol.CodeUnauthorized, "bead %s: this agent is not one of its members", beadID)
	}
	if err != nil {
		return nil, err
	}
	return n.beadContext(b), nil
}

// followBead returns the bead, following it first if need be.
func (n *Node) followBead(ctx context.Context, beadID string) (*bead, error) {
	if n.topics == nil {
		return nil, ErrNoTopics
	}
	if err := beadctx.CheckBeadID(beadID); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "%v", err)
	}
	c := n.contexts
	c.mu.Lock()
	b := c.beads[beadID]
	if b == nil {
		if len(c.beads) >= beadctx.MaxBeads {
			c.mu.Unlock()
			return nil, protocol.Errorf(protocol.CodeRateLimited, "this node follows %d bead contexts, the most it may", beadctx.MaxBeads)
		}
		b = &bead{id: beadID, doc: beadctx.NewDoc(), ready: make(chan struct{})}
		c.beads[beadID] = b
		start := !c.started
		c.started = true
		c.mu.Unlock()
		if start && n.track() {
			go func() {
				defer n.wg.Done()
				n.resyncBeads()
			}()
		}
		n.joinBead(ctx, b)
		return b, b.err
	}
	c.mu.Unlock()
	select {
	case <-b.ready:
		return b, b.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// joinBead subscribes to the bead's topic, then catches up; a bead that
// cannot be subscribed to is forgotten, so that a later access tries
// again.
func (n *Node) joinBead(ctx context.Context, b *bead) {
	defer close(b.ready)
	topic := beadctx.Topic(b.id)
	// The subscription lasts as long as the node (Close ends it).
	_, err := n.topics.Subscribe(topic, func(m pubsub.Message) {
		if m.Topic != topic || n.contexts.dropLive.Load() { // a bead id ending in '-', '.' or '_' is a prefix pattern
			return
		}
		n.takeBeadPatch(b, topicMessage(m))
	})
	if err != nil {
		b.err = err
		n.contexts.mu.Lock()
		delete(n.contexts.beads, b.id)
		n.contexts.mu.Unlock()
		return
	}
	n.catchUpBead(ctx, b)
}

// catchUpBead fetches the bead's history from keepers and folds it in,
// and reports whether a keeper answered. Finding none is not an error:
// the bead may be new, or its members away; what they published is
// folded in when it arrives.
func (n *Node) catchUpBead(ctx context.Context, b *bead) bool {
	n.contexts.mu.Lock()
	since := b.synced
	n.contexts.mu.Unlock()
	if !since.IsZero() {
		since = since.Add(-beadOverlap)
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, beadCatchUpWait)
	defer cancel()
	msgs, _, err := n.topics.FetchHistory(ctx, beadctx.Topic(b.id), since)
	if err != nil {
		if !errors.Is(err, pubsub.ErrNoKeepers) {
			n.log.Debug("bead context catch-up failed", "bead", b.id, "err", err)
		}
		return false
	}
	for _, m := range msgs {
		if m.Topic == beadctx.Topic(b.id) {
			n.takeBeadPatch(b, topicMessage(m))
		}
	}
	n.contexts.mu.Lock()
	b.synced = began
	n.contexts.mu.Unlock()
	return true
}

// resyncBeads catches every followed bead up every Config.BeadResync,
// one bead at a time, until the node closes.
func (n *Node) resyncBeads() {
	t := time.NewTicker(n.contexts.resync)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		n.contexts.mu.Lock()
		beads := make([]*bead, 0, len(n.contexts.beads))
		for _, b := range n.contexts.beads {
			beads = append(beads, b)
		}
		n.contexts.mu.Unlock()
		for _, b := range beads {
			if !joined(b) {
				continue
			}
			// All beads share the keepers of the beadctx family: when
			// none answers for one, the round ends.
			if !n.catchUpBead(n.ctx, b) {
				break
			}
		}
	}
}

// joined reports whether b has been joined successfully.
func joined(b *bead) bool {
	select {
	case <-b.ready:
		return b.err == nil
	default:
		return false
	}
}

// takeBeadPatch decodes a published patch strictly and folds it in; a
// malformed one is dropped (the author is the signer, so it can only
// spoil its own patches).
func (n *Node) takeBeadPatch(b *bead, m protocol.TopicMessage) {
	beadID, p, err := beadctx.DecodePayload(m.Payload, m.From, m.Time)
	if err == nil && beadID != b.id {
		err = errors.New("the patch names another bead than its topic")
	}
	if err != nil {
		n.log.Debug("bead context patch dropped", "bead", b.id, "from", m.From, "err", err)
		return
	}
	n.contexts.clock.Observe(p.At)
	n.contexts.mu.Lock()
	_, err = b.doc.Add(p)
	n.contexts.mu.Unlock()
	switch {
	case errors.Is(err, beadctx.ErrNotMember):
		// Kept (a member list arriving late may admit it) but not
		// applied, and counted in the context's refused.
		n.log.Info("bead context patch refused: its author is not a member", "bead", b.id, "from", m.From, "hlc", p.At.String())
	case err != nil:
		n.log.Debug("bead context patch dropped", "bead", b.id, "from", m.From, "err", err)
	}
}

func (n *Node) beadContext(b *bead) *protocol.BeadContext {
	n.contexts.mu.Lock()
	defer n.contexts.mu.Unlock()
	at, agent := b.doc.Version()
	history := b.doc.History(beadctx.MaxHistory)
	changes := make([]protocol.BeadChange, 0, len(history))
	for _, c := range history {
		changes = append(changes, protocol.BeadChange{From: c.Agent, To: beadctx.Topic(b.id), Subject: changeSubject(c),
			Timestamp: time.UnixMilli(c.At.Wall).UTC().Format("2006-01-02T15:04:05.000Z07:00")})
	}
	return &protocol.BeadContext{BeadID: b.id, CollaboratingAgents: b.doc.Members(), SharedContext: json.RawMessage(b.doc.JSON()),
		Version: protocol.BeadVersion{Wall: at.Wall, Counter: at.Counter, Agent: agent}, Patches: b.doc.Patches(), Refused: b.doc.Refused(),
		MessageHistory: changes}
}

// Bounds of a change's subject in message_history.
const (
	maxSubjectKey   = 64
	maxSubjectBytes = 256
)

// changeSubject says what a change did: "patch review_status,
// test_results (+2 more); members: 3".
func changeSubject(c beadctx.Change) string {
	var b strings.Builder
	b.WriteString(string(c.Op))
	for i, k := range c.Keys {
		if i == 0 {
			b.WriteByte(' ')
		} else {
			b.WriteString(", ")
		}
		b.WriteString(truncateUTF8(k, maxSubjectKey))
	}
	if c.MoreKeys > 0 {
		fmt.Fprintf(&b, " (+%d more)", c.MoreKeys)
	}
	if c.Members != nil {
		fmt.Fprintf(&b, "; members: %d", len(c.Members))
	}
	return truncateUTF8(b.String(), maxSubjectBytes)
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
