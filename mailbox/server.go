package mailbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// Server is a relay's mailbox service: it answers protocol.MailboxProtocol
// streams on a host and keeps items in a store, whose owner closes it
// after the Server.
type Server struct {
	cfg  Config
	log  *slog.Logger
	host host.Host
	st   *store.Store

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.RWMutex // guards closed and every wg.Add after NewServer
	closed bool

	displaced atomic.Uint64
}

// NewServer starts a mailbox service on h, keeping items in st.
func NewServer(h host.Host, st *store.Store, opts ...Option) (*Server, error) {
	if st == nil {
		return nil, ErrNoStore
	}
	cfg := DefaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("mailbox: %w", err)
		}
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, log: log.With("component", "mailbox"), host: h, st: st, ctx: ctx, cancel: cancel}
	s.wg.Go(s.expireLoop)
	h.SetStreamHandler(protocol.MailboxProtocol, s.handle)
	return s, nil
}

// Close stops answering and waits for the requests being served and the
// expiry loop. It is idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.host.RemoveStreamHandler(protocol.MailboxProtocol)
	s.cancel()
	s.wg.Wait()
	return nil
}

// Deposit stores envelope for agent to as if from, its signer, had
// deposited it over the protocol, with the same checks: the relay's own
// node leaves its requests in the mailboxes it serves without a stream to
// itself. Its errors match ErrFull, ErrRefused or ErrFailed as a
// Client's do.
func (s *Server) Deposit(from, to peer.ID, envelope json.RawMessage) error {
	req := &Request{Op: OpDeposit, To: to.String(), Envelope: envelope}
	if err := req.check(); err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	return s.deposit(from, req)
}

// Displaced returns how many items deposits have displaced from full
// mailboxes since the Server started (a node exports it as a metric).
func (s *Server) Displaced() uint64 { return s.displaced.Load() }

// handle serves one request stream.
func (s *Server) handle(st network.Stream) {
	s.mu.RLock()
	if s.closed {
		s.mu.RUnlock()
		_ = st.Reset()
		return
	}
	s.wg.Add(1)
	s.mu.RUnlock()
	defer s.wg.Done()
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(s.cfg.IOTimeout))
	remote := st.Conn().RemotePeer()
	frame, err := protocol.NewFrameReader(st, maxRequestFrame).Next()
	if err != nil {
		s.log.Debug("mailbox request unread", "remote_peer", remote, "err", err)
		_ = st.Reset()
		return
	}
	resp := s.serve(remote, frame)
	body, err := json.Marshal(resp)
	if err != nil {
		_ = st.Reset()
		return
	}
	if _, err := st.Write(protocol.AppendFrame(nil, body)); err != nil {
		_ = st.Reset()
	}
}

// serve answers one request frame from remote.
func (s *Server) serve(remote peer.ID, frame []byte) *Response {
	req, err := ParseRequest(frame)
	if err != nil {
		s.log.Debug("mailbox request refused", "remote_peer", remote, "err", err)
		return answer(err)
	}
	switch req.Op {
	case OpDeposit:
		err = s.deposit(remote, req)
	case OpFetch:
		return s.fetch(remote, req)
	case OpAck:
		err = s.ack(remote, req.IDs)
	case OpDefer:
		err = s.deferItems(remote, req.IDs)
	}
	if err != nil {
		s.log.Debug("mailbox "+req.Op, "remote_peer", remote, "err", err)
	}
	return answer(err)
}

// answer is the Response of an outcome.
func answer(err error) *Response {
	switch {
	case err == nil:
		return &Response{Status: StatusOK}
	case errors.Is(err, ErrFull):
		return &Response{Status: StatusFull, Message: err.Error()}
	case errors.Is(err, ErrRefused):
		return &Response{Status: StatusRefused, Message: err.Error()}
	default:
		return &Response{Status: StatusError, Message: err.Error()}
	}
}

// Scopes of the store's marks (store.Mark) a Server keeps.
const (
	// AgentsScope marks the agents that named this relay as their
	// mailbox (key: agent id), until the TTL after they last said so.
	AgentsScope = "mailbox-agents"
	// KnownScope marks the senders each agent took an item from on this
	// relay (key: agent id / sender id), until the TTL after the last.
	KnownScope = "mailbox-known"
	// renewAfter is how old a mark gets before the same fact renews it:
	// a fetch or a hello every few seconds costs no commit each.
	renewAfter = time.Hour
)

// UnknownPool is the store pool (store.Message.Pool) of deposits from
// senders unknown to their recipient, bounded together by
// Config.UnknownTotalBytes.
const UnknownPool = "unknown"

// Register records that agent names this relay as its mailbox (a hello
// or heartbeat it signed lists the relay; a node calls it), for the TTL:
// the relay holds mail only for agents registered so. An agent's fetch
// registers it too. A relay holding MaxAgents agents refuses a new one
// with an error matching ErrFull.
func (s *Server) Register(agent peer.ID) error {
	return s.mark(AgentsScope, agent.String(), s.cfg.MaxAgents)
}

// Registered reports whether agent named this relay as its mailbox within
// the TTL.
func (s *Server) Registered(agent peer.ID) (bool, error) {
	_, ok, err := s.st.Marked(s.ctx, AgentsScope, agent.String(), s.cfg.Now())
	return ok, err
}

// mark sets key in scope for the TTL, unless it was set less than
// renewAfter ago.
func (s *Server) mark(scope, key string, limit int) error {
	now := s.cfg.Now()
	until, ok, err := s.st.Marked(s.ctx, scope, key, now)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrFailed, err)
	}
	if ok && until.After(now.Add(s.cfg.TTL-renewAfter)) {
		return nil
	}
	if err := s.st.Mark(s.ctx, scope, key, now.Add(s.cfg.TTL), limit); err != nil {
		if errors.Is(err, store.ErrFull) {
			return fmt.Errorf("%w: %v", ErrFull, err)
		}
		return fmt.Errorf("%w: %v", ErrFailed, err)
	}
	return nil
}

// deposit verifies and stores an envelope for req.To.
func (s *Server) deposit(remote peer.ID, req *Request) error {
	to, err := sign.ParseAgentID(req.To)
	if err != nil {
		return fmt.Errorf("%w: to: %v", ErrRefused, err)
	}
	switch ok, err := s.Registered(to); {
	case err != nil:
		return fmt.Errorf("%w: %v", ErrFailed, err)
	case !ok:
		return fmt.Errorf("%w: %s has not named this relay as its mailbox (no hello or fetch of its within %s)", ErrRefused, to, s.cfg.TTL)
	}
	e, _, err := Open(req.Envelope, to)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	from, _ := e.Sender()
	if from != remote {
		// Only the signer deposits its envelopes: nobody replays another
		// agent's old messages into a mailbox.
		return fmt.Errorf("%w: envelope signed by %s, deposited by %s", ErrRefused, from, remote)
	}
	now := s.cfg.Now()
	ts, err := e.Time()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	if ts.After(now.Add(s.cfg.MaxSkew)) || now.Sub(ts) > s.cfg.TTL {
		return fmt.Errorf("%w: envelope time %s is outside the mailbox's window", ErrRefused, e.Timestamp)
	}
	expires := ts.Add(s.cfg.TTL)
	bounds := store.Bounds{
		PerRecipient: s.cfg.PerAgent, PerRecipientBytes: s.cfg.PerAgentBytes, Bytes: s.cfg.TotalBytes,
		PerSender: s.cfg.PerSender, PerSenderBytes: s.cfg.PerSenderBytes, SenderBytes: s.cfg.SenderTotalBytes,
	}
	_, known, err := s.st.Marked(s.ctx, KnownScope, knownKey(to, from), now)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrFailed, err)
	}
	m := store.Message{
		ID: itemID(to, from, e.ID), Queue: Queue, Topic: "agent:" + to.String(), From: from.String(), To: to.String(),
		Payload: req.Envelope, Time: now, NextAttempt: expires, Expires: expires,
	}
	if !known {
		// The reserves: a flood of fresh identities fills at most the rest
		// of the agent's mailbox, and UnknownPool's part of the relay.
		bounds.PerRecipient -= s.cfg.ReservedItems
		bounds.PerRecipientBytes -= s.cfg.ReservedBytes
		bounds.PoolBytes = s.cfg.UnknownTotalBytes
		m.Pool = UnknownPool
	}
	displaced, err := s.st.EnqueueDisplacing(s.ctx, m, bounds, now.Add(-s.cfg.DisplaceAfter))
	for _, d := range displaced {
		// Its sender was told "ok" and its agent has seen it: the relay's
		// log and metric are what is left of it.
		s.displaced.Add(1)
		s.log.Warn("mailbox: deferred item displaced by a deposit to a full mailbox", "agent", to, "from", d.From, "item", d.ID,
			"deferred_since", d.Left, "by", from)
	}
	switch {
	case errors.Is(err, store.ErrExists):
		return nil // deposited before: one copy is enough
	case errors.Is(err, store.ErrFull):
		s.log.Info("mailbox full", "agent", to, "from", from, "known", known, "err", err)
		if !known {
			return fmt.Errorf("%w: the mailbox of %s on this relay, or the relay, holds all it may from senders their agents have not taken mail from (%v)", ErrFull, to, err)
		}
		return fmt.Errorf("%w: the mailbox of %s on this relay holds all it may (%v)", ErrFull, to, err)
	case errors.Is(err, store.ErrTooLarge), errors.Is(err, store.ErrInvalid):
		return fmt.Errorf("%w: %v", ErrRefused, err)
	case err != nil:
		return fmt.Errorf("%w: %v", ErrFailed, err)
	}
	s.log.Debug("mailbox: deposited", "agent", to, "from", from, "id", e.ID)
	return nil
}

// fetch returns a page of remote's items.
func (s *Server) fetch(remote peer.ID, req *Request) *Response {
	after, _ := parseCursor(req.After)
	limit := req.Limit
	if limit == 0 {
		limit = DefaultPage
	}
	to := remote.String()
	// The agent itself asks: it uses this relay as its mailbox.
	if err := s.Register(remote); err != nil {
		s.log.Warn("mailbox: agent not registered", "agent", remote, "err", err)
	}
	ms, last, err := s.st.PendingFor(s.ctx, Queue, to, after, limit)
	if err != nil {
		return answer(fmt.Errorf("%w: %v", ErrFailed, err))
	}
	resp := &Response{Status: StatusOK, Next: req.After}
	size := 0
	for i, m := range ms {
		if i > 0 && size+len(m.Payload) > pageBytes {
			// Cut by bytes: the cursor is that of the last item kept.
			resp.More = true
			if _, last, err = s.st.PendingFor(s.ctx, Queue, to, after, i); err != nil {
				return answer(fmt.Errorf("%w: %v", ErrFailed, err))
			}
			break
		}
		size += len(m.Payload)
		resp.Items = append(resp.Items, Item{ID: m.ID, Envelope: m.Payload, Deferred: !m.Left.IsZero()})
	}
	if len(resp.Items) > 0 {
		resp.Next = strconv.FormatUint(last, 10)
	}
	if !resp.More && len(ms) == limit {
		rest, _, err := s.st.PendingFor(s.ctx, Queue, to, last, 1)
		if err != nil {
			return answer(fmt.Errorf("%w: %v", ErrFailed, err))
		}
		resp.More = len(rest) > 0
	}
	return resp
}

// own checks that ids name items of remote's mailbox.
func own(remote peer.ID, ids []string) error {
	prefix := remote.String() + "/"
	for _, id := range ids {
		if !strings.HasPrefix(id, prefix) {
			return fmt.Errorf("%w: item %.80s is not in the mailbox of %s", ErrRefused, id, remote)
		}
	}
	return nil
}

// deferItems records that remote fetched items of its mailbox and could
// not take them yet; the first time counts. Unknown ids are ignored, as
// by ack.
func (s *Server) deferItems(remote peer.ID, ids []string) error {
	if err := own(remote, ids); err != nil {
		return err
	}
	if _, err := s.st.MarkLeft(s.ctx, Queue, remote.String(), s.cfg.Now(), ids...); err != nil {
		return fmt.Errorf("%w: %v", ErrFailed, err)
	}
	return nil
}

// ack deletes items of remote's mailbox. Unknown ids are ignored: an ack
// repeated after a lost answer finds them gone.
func (s *Server) ack(remote peer.ID, ids []string) error {
	if err := own(remote, ids); err != nil {
		return err
	}
	// Concurrent deletes share the store's commits.
	errs := make([]error, len(ids))
	taken := make([]bool, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			err := s.st.Delivered(s.ctx, id)
			taken[i] = err == nil
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %v", ErrFailed, err)
	}
	// The agent took these: their senders are known to it, and may fill
	// the reserve of its mailbox. Only items that were there count, so
	// that an agent cannot fill the relay's memory of known senders.
	seen := map[peer.ID]bool{}
	for i, id := range ids {
		from, _, _ := strings.Cut(strings.TrimPrefix(id, remote.String()+"/"), "/")
		p, err := sign.ParseAgentID(from)
		if !taken[i] || err != nil || seen[p] {
			continue
		}
		seen[p] = true
		if err := s.mark(KnownScope, knownKey(remote, p), s.cfg.MaxKnown); err != nil {
			s.log.Warn("mailbox: known sender not recorded", "agent", remote, "from", p, "err", err)
		}
	}
	return nil
}

// knownKey is the KnownScope key of sender from of agent to.
func knownKey(to, from peer.ID) string { return to.String() + "/" + from.String() }

// expireLoop deletes items past their TTL: their due time in the queue is
// their expiry, so it sleeps until the earliest one, or a deposit.
func (s *Server) expireLoop() {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		deposited := s.st.Signal(Queue)
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-deposited:
		}
		due, err := s.st.DueIn(s.ctx, Queue, s.cfg.Now(), MaxPage)
		for _, m := range due {
			if err := s.st.Delivered(s.ctx, m.ID); err != nil && !errors.Is(err, store.ErrNotFound) && s.ctx.Err() == nil {
				s.log.Warn("mailbox: expired item not deleted", "id", m.ID, "err", err)
			}
		}
		if len(due) > 0 {
			s.log.Info("mailbox: expired items deleted", "items", len(due))
		}
		t.Stop()
		next, ok, nerr := s.st.NextDueIn(s.ctx, Queue)
		switch {
		case s.ctx.Err() != nil:
			return
		case len(due) == MaxPage:
			t.Reset(0)
		case err != nil || nerr != nil:
			s.log.Warn("mailbox: store unreadable", "err", errors.Join(err, nerr))
			t.Reset(time.Minute)
		case ok:
			t.Reset(max(next.Sub(s.cfg.Now()), 0))
		}
	}
}
