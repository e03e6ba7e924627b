package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// Method names of the seed 001 bus.
const (
	MethodSubscribe      = "subscribe"
	MethodUnsubscribe    = "unsubscribe"
	MethodSendMessage    = "sendMessage"
	MethodProcessMessage = "processMessage"
	// Extensions for the CLI: history and the dead-letter queue.
	MethodBusHistory     = "bus.history"
	MethodBusDeadLetters = "bus.deadLetters"
	MethodBusReplay      = "bus.replay"
)

// Policy is a subscription's propagation policy (seed 001).
type Policy string

// The propagation policies of seed 001.
const (
	// PolicyStopOnProcessed stops after a subscriber that returns
	// processed: true (or stopPropagation: true). The default.
	PolicyStopOnProcessed Policy = "stopPropagationOnProcessed"
	// PolicyStopOnStop stops only after stopPropagation: true.
	PolicyStopOnStop Policy = "stopPropagationOnStop"
	// PolicyContinueAll never stops.
	PolicyContinueAll Policy = "continueAll"
)

func (p Policy) valid() bool {
	return p == PolicyStopOnProcessed || p == PolicyStopOnStop || p == PolicyContinueAll
}

// BusConfig configures the bus a Server serves.
type BusConfig struct {
	// DefaultPolicy applies to subscriptions that name none.
	DefaultPolicy Policy
	// MaxAttempts is how many deliveries are tried before a message goes
	// to the dead-letter queue (seed 001's diagram: 3). Only deliveries
	// count: a retry that finds its subscriber away (its client id not
	// subscribed to a matching pattern, or its connection gone during the
	// attempt) waits for it instead, up to MessageTTL.
	MaxAttempts int
	// MessageTTL bounds how long an acknowledged message waits in the
	// outbox for its subscriber, from when it was sent; past it the
	// message is a dead letter that says so (seed 004: 7 days).
	MessageTTL time.Duration
	// RetryBackoff is the first wait before a retry when the subscriber
	// gives no retry_seconds; it doubles per attempt up to MaxBackoff.
	RetryBackoff time.Duration
	MaxBackoff   time.Duration
	// DeliveryTimeout bounds one processMessage call.
	DeliveryTimeout time.Duration
	// MeshWait bounds how long sendMessage waits for mesh topic peers.
	MeshWait time.Duration
}

// DefaultBusConfig returns the bus defaults.
func DefaultBusConfig() BusConfig {
	return BusConfig{
		DefaultPolicy:   PolicyStopOnProcessed,
		MaxAttempts:     3,
		MessageTTL:      7 * 24 * time.Hour,
		RetryBackoff:    time.Second,
		MaxBackoff:      time.Minute,
		DeliveryTimeout: 30 * time.Second,
		MeshWait:        2 * time.Second,
	}
}

func (b BusConfig) validate() error {
	switch {
	case !b.DefaultPolicy.valid():
		return fmt.Errorf("relay: unknown default policy %q", b.DefaultPolicy)
	case b.MaxAttempts < 1:
		return errors.New("relay: BusConfig.MaxAttempts must be at least 1")
	case b.MessageTTL <= 0:
		return errors.New("relay: BusConfig.MessageTTL must be positive")
	case b.RetryBackoff <= 0 || b.MaxBackoff < b.RetryBackoff:
		return errors.New("relay: BusConfig backoffs must be positive, MaxBackoff at least RetryBackoff")
	case b.DeliveryTimeout <= 0 || b.MeshWait < 0:
		return errors.New("relay: BusConfig.DeliveryTimeout must be positive and MeshWait not negative")
	}
	return nil
}

// SuccessResult is subscribe's and unsubscribe's result.
type SuccessResult struct {
	Success bool `json:"success"`
}

// Ack is one subscriber's acknowledgement in a sendMessage result.
type Ack struct {
	ClientID  string `json:"client_id"`
	Processed bool   `json:"processed"`
	Message   string `json:"message,omitempty"`
	// Retrying is set when the delivery will be retried (the message is
	// in the persisted outbox).
	Retrying bool `json:"retrying,omitempty"`
}

// SendResult is sendMessage's result (seed 001, extended form).
type SendResult struct {
	Success         bool   `json:"success"`
	StopPropagation bool   `json:"stopPropagation"`
	Acks            []Ack  `json:"acks"`
	MessageID       string `json:"messageId"`
}

// ProcessParams are the params of processMessage (and of sendMessage
// when the bus delivers to a client that does not know processMessage).
type ProcessParams struct {
	Topic   string          `json:"topic"`
	Payload json.RawMessage `json:"payload"`
}

// ProcessResult is what a subscriber answers to processMessage.
type ProcessResult struct {
	Processed       bool   `json:"processed"`
	ShouldRetry     bool   `json:"should_retry"`
	RetrySeconds    int    `json:"retry_seconds"`
	Message         string `json:"message,omitempty"`
	StopPropagation bool   `json:"stopPropagation"`
	// Success is the base protocol's answer to a delivered sendMessage,
	// read as Processed when Processed is absent.
	Success *bool `json:"success,omitempty"`
}

// busClient is a connection's bus state.
type busClient struct {
	id string // the clientId it initialized with (rpc.Conn.ClientID)

	mu sync.Mutex
	// legacy is set once the client answered processMessage with
	// method-not-found: it gets deliveries as sendMessage, as the base
	// protocol of seed 001 does.
	legacy bool
}

type busClientKey struct{}

// subscription is one entry of the bus's ordered subscription list.
type subscription struct {
	seq         uint64
	conn        *rpc.Conn
	client      *busClient
	pattern     string
	policy      Policy
	defaultOnly bool // a default handler for unrouted topics matching pattern
	meshCancel  func()
}

// bus is the seed 001 message bus of a Server.
type bus struct {
	srv   *rpc.Server
	mesh  rpc.Mesh
	now   func() time.Time
	cfg   BusConfig
	store *store.Store // nil: no retries, no history, no dead letters
	log   *slog.Logger

	mu   sync.Mutex
	subs []*subscription // in subscription order
	seq  uint64
	// meshSubs counts local subscriptions per pattern subscribed on the
	// mesh, with the cancel of the mesh subscription.
	meshSubs map[string]*meshSub

	// seen holds the (author, id) of recent mesh messages: the bus's own,
	// published with an id it chose, and each one received, which comes
	// once per local pattern that matches it.
	seen *recentIDs

	kick     chan struct{}
	historyQ chan store.Message
	ctx      context.Context
	cancel   context.CancelFunc

	lmu    sync.Mutex // guards closed, and wg.Add against close's wg.Wait
	closed bool
	wg     sync.WaitGroup
}

type meshSub struct {
	n      int
	cancel func()
}

func newBus(srv *rpc.Server, mesh rpc.Mesh, cfg BusConfig, st *store.Store, log *slog.Logger) *bus {
	ctx, cancel := context.WithCancel(context.Background())
	b := &bus{srv: srv, mesh: mesh, now: srv.Now, cfg: cfg, store: st, log: log.With("component", "bus"), meshSubs: map[string]*meshSub{},
		seen: newRecentIDs(recentMeshIDs), kick: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
	b.register()
	if st != nil {
		b.historyQ = make(chan store.Message, historyQueue)
		b.wg.Go(b.retryLoop)
		for range historyWriters {
			b.wg.Go(b.historyLoop)
		}
	}
	return b
}

func (b *bus) close() {
	b.lmu.Lock()
	b.closed = true
	b.lmu.Unlock()
	b.cancel()
	b.wg.Wait()
	b.mu.Lock()
	subs := b.subs
	b.subs = nil
	b.mu.Unlock()
	for _, sub := range subs {
		b.dropMeshSub(sub)
	}
}

// clientOf returns a connection's bus state, creating it on first use.
func clientOf(c *rpc.Conn) *busClient {
	return c.LoadOrStoreValue(busClientKey{}, &busClient{id: c.ClientID()}).(*busClient)
}

// initializedClient returns the client's state and id, or -32006 before
// initialize (which the server enforces already).
func initializedClient(c *rpc.Conn) (*busClient, string, error) {
	if c.ClientID() == "" {
		return nil, "", rpc.Errorf(rpc.CodeNotInitialized, "not initialized: send initialize first (seed 001)")
	}
	bc := clientOf(c)
	return bc, bc.id, nil
}

var (
	busSubFields      = map[string]bool{"topic": true, "policy": true, "defaultHandler": true}
	sendMessageFields = map[string]bool{"topic": true, "payload": true}
)

// busParams decodes a bus method's object params. A missing or malformed
// params object is -32600, as seed 001 lists for subscribe.
func busParams(method string, raw json.RawMessage, fields map[string]bool) (map[string]json.RawMessage, error) {
	var w map[string]json.RawMessage
	if len(raw) == 0 || raw[0] != '{' || json.Unmarshal(raw, &w) != nil {
		return nil, rpc.Errorf(rpc.CodeInvalidRequest, "invalid params: %s takes an object {%s}", method, quotedKeys(fields))
	}
	for k := range w {
		if !fields[k] {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: unknown field %q (%s takes %s)", k, method, quotedKeys(fields))
		}
	}
	return w, nil
}

// topicParam reads the "topic" member; missing is -32600 (seed 001).
func topicParam(method string, w map[string]json.RawMessage) (string, error) {
	raw, ok := w["topic"]
	var topic string
	if !ok || json.Unmarshal(raw, &topic) != nil || topic == "" {
		return "", rpc.Errorf(rpc.CodeInvalidRequest, `invalid params: %s needs "topic", a non-empty string`, method)
	}
	if len(topic) > rpc.MaxTopicLen || strings.ContainsRune(topic, 0) {
		return "", rpc.Errorf(rpc.CodeInvalidParams, "invalid params: topic longer than %d bytes or with a NUL", rpc.MaxTopicLen)
	}
	return topic, nil
}

func (b *bus) subscribe(_ context.Context, r *rpc.Request) (any, error) {
	bc, id, err := initializedClient(r.Conn)
	if err != nil {
		return nil, err
	}
	if err := b.publicTopic(r); err != nil {
		return nil, err
	}
	w, err := busParams(MethodSubscribe, r.Params, busSubFields)
	if err != nil {
		return nil, err
	}
	pattern, err := topicParam(MethodSubscribe, w)
	if err != nil {
		return nil, err
	}
	if !protocol.ValidPattern(pattern) {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: pattern %q is malformed", pattern)
	}
	policy := b.cfg.DefaultPolicy
	if raw, ok := w["policy"]; ok && !isNull(raw) {
		if json.Unmarshal(raw, &policy) != nil || !policy.valid() {
			return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: policy must be %s, %s or %s", PolicyStopOnProcessed, PolicyStopOnStop, PolicyContinueAll)
		}
	}
	var dflt bool
	if raw, ok := w["defaultHandler"]; ok && json.Unmarshal(raw, &dflt) != nil {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "defaultHandler" must be a boolean`)
	}
	b.mu.Lock()
	for _, s := range b.subs {
		if s.conn == r.Conn && s.pattern == pattern && s.defaultOnly == dflt {
			b.mu.Unlock()
			return nil, rpc.Errorf(rpc.CodeAlreadySubscribed, "already subscribed to %q", pattern)
		}
	}
	b.seq++
	sub := &subscription{seq: b.seq, conn: r.Conn, client: bc, pattern: pattern, policy: policy, defaultOnly: dflt}
	b.subs = append(b.subs, sub)
	b.mu.Unlock()
	if !dflt {
		b.addMeshSub(pattern)
	}
	r.Conn.AfterClose(func() { b.removeSub(sub) })
	b.log.Debug("subscribed", "client", id, "pattern", pattern, "policy", policy, "default", dflt)
	b.wakeClient(id)
	return SuccessResult{Success: true}, nil
}

func (b *bus) unsubscribe(_ context.Context, r *rpc.Request) (any, error) {
	if _, _, err := initializedClient(r.Conn); err != nil {
		return nil, err
	}
	w, err := busParams(MethodUnsubscribe, r.Params, map[string]bool{"topic": true, "defaultHandler": true})
	if err != nil {
		return nil, err
	}
	pattern, err := topicParam(MethodUnsubscribe, w)
	if err != nil {
		return nil, err
	}
	var dflt bool
	if raw, ok := w["defaultHandler"]; ok && json.Unmarshal(raw, &dflt) != nil {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: "defaultHandler" must be a boolean`)
	}
	b.mu.Lock()
	var found *subscription
	for _, s := range b.subs { // the first match: seed 001's FIFO rule
		if s.conn == r.Conn && s.pattern == pattern && s.defaultOnly == dflt {
			found = s
			break
		}
	}
	b.mu.Unlock()
	if found == nil {
		return nil, rpc.Errorf(rpc.CodeSubscriptionNotFound, "subscription not found: %q", pattern)
	}
	b.removeSub(found)
	return SuccessResult{Success: true}, nil
}

func (b *bus) removeSub(sub *subscription) {
	b.mu.Lock()
	i := -1
	for j, s := range b.subs {
		if s == sub {
			i = j
			break
		}
	}
	if i < 0 {
		b.mu.Unlock()
		return
	}
	b.subs = append(b.subs[:i], b.subs[i+1:]...)
	b.mu.Unlock()
	b.dropMeshSub(sub)
}

// addMeshSub subscribes the pattern on the mesh (once per pattern) so that
// messages published elsewhere reach local subscribers.
func (b *bus) addMeshSub(pattern string) {
	pub, ok := b.mesh.(rpc.Publisher)
	if !ok {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if ms := b.meshSubs[pattern]; ms != nil {
		ms.n++
		return
	}
	cancel, err := pub.Subscribe(pattern, b.fromMesh)
	if err != nil {
		// A pattern the mesh cannot carry (a wildcard family) is still a
		// local subscription.
		b.log.Debug("pattern not subscribed on the mesh", "pattern", pattern, "err", err)
		cancel = func() {}
	}
	b.meshSubs[pattern] = &meshSub{n: 1, cancel: cancel}
}

func (b *bus) dropMeshSub(sub *subscription) {
	if sub.defaultOnly {
		return
	}
	b.mu.Lock()
	ms := b.meshSubs[sub.pattern]
	if ms == nil {
		b.mu.Unlock()
		return
	}
	ms.n--
	if ms.n > 0 {
		b.mu.Unlock()
		return
	}
	delete(b.meshSubs, sub.pattern)
	b.mu.Unlock()
	ms.cancel()
}

// route returns the subscriptions a topic goes to, newest first, without
// default handlers and without subscriptions shadowed by a newer one to
// the same pattern (seed 001: later subscriptions take precedence).
func (b *bus) route(topic string) []*subscription {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []*subscription
	seen := map[string]bool{}
	for i := len(b.subs) - 1; i >= 0; i-- {
		s := b.subs[i]
		if s.defaultOnly || !protocol.MatchTopic(s.pattern, topic) || seen[s.pattern] {
			continue
		}
		seen[s.pattern] = true
		out = append(out, s)
	}
	return out
}

// defaultHandler returns the newest default handler for a topic, or nil.
func (b *bus) defaultHandler(topic string) *subscription {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(b.subs) - 1; i >= 0; i-- {
		if s := b.subs[i]; s.defaultOnly && protocol.MatchTopic(s.pattern, topic) {
			return s
		}
	}
	return nil
}

// subscriptionOf returns the newest live subscription of a client matching
// topic, for a retry addressed to that client.
func (b *bus) subscriptionOf(clientID, topic string) *subscription {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := len(b.subs) - 1; i >= 0; i-- {
		s := b.subs[i]
		if s.client.id == clientID && protocol.MatchTopic(s.pattern, topic) {
			return s
		}
	}
	return nil
}

func newMessageID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// conversationOf reads a conversation id from a payload: its
// "conversation_id", else its "chat_id" (seed 001's channel messages).
func conversationOf(payload json.RawMessage) string {
	var p struct {
		ConversationID any `json:"conversation_id"`
		ChatID         any `json:"chat_id"`
	}
	if json.Unmarshal(payload, &p) != nil {
		return ""
	}
	for _, v := range []any{p.ConversationID, p.ChatID} {
		switch v := v.(type) {
		case string:
			return v
		case float64:
			return fmt.Sprint(v)
		}
	}
	return ""
}

func (b *bus) sendMessage(ctx context.Context, r *rpc.Request) (any, error) {
	_, clientID, err := initializedClient(r.Conn)
	if err != nil {
		return nil, err
	}
	if err := b.publicTopic(r); err != nil {
		return nil, err
	}
	w, err := busParams(MethodSendMessage, r.Params, sendMessageFields)
	if err != nil {
		return nil, err
	}
	topic, err := topicParam(MethodSendMessage, w)
	if err != nil {
		return nil, err
	}
	if !protocol.ValidPattern(topic) || strings.ContainsAny(topic, "*?[") {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: send to a topic, not a pattern: %q", topic)
	}
	payload := w["payload"]
	if len(payload) == 0 || payload[0] != '{' {
		return nil, rpc.Errorf(rpc.CodeInvalidParams, `invalid params: sendMessage needs "payload", a JSON object`)
	}
	msg := store.Message{ID: newMessageID(), Topic: topic, From: clientID, Payload: payload, Time: b.now().UTC(), ConversationID: conversationOf(payload)}
	res, err := b.dispatch(ctx, msg, true)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// dispatch routes a message: to a mesh agent for agent:<id> topics that no
// local client holds, to local subscribers in order under their policies,
// to the mesh, and to a default handler when nothing else takes it. local
// is false for messages that came from the mesh: they are not published
// back, and never go to a default handler (every node would spawn one).
func (b *bus) dispatch(ctx context.Context, msg store.Message, local bool) (SendResult, error) {
	res := SendResult{MessageID: msg.ID, Acks: []Ack{}}
	subs := b.route(msg.Topic)
	if local && len(subs) == 0 {
		if ack, ok := b.toMeshAgent(ctx, msg); ok {
			res.Acks = append(res.Acks, ack)
			res.Success = true
			b.record(msg)
			return res, nil
		}
	}
	var meshDone chan Ack
	if local {
		// With local subscribers the mesh copy goes out in the background
		// (it may wait for topic peers to be found) and is not in the
		// acks; without any, its ack is what routes the message.
		meshDone = b.toMesh(ctx, msg, len(subs) > 0)
	}
	var retries []store.Message
	outcome := func(s *subscription, pr ProcessResult, err error) Ack {
		ack := Ack{ClientID: s.client.id, Processed: err == nil && pr.Processed, Message: pr.Message}
		if err != nil {
			ack.Message = err.Error()
		}
		if err != nil || pr.ShouldRetry {
			if rm, ok := b.retryFor(msg, s.client.id, pr, err); ok {
				if err != nil && s.conn.Context().Err() != nil {
					// The subscriber left during the attempt: an
					// absence, not a delivery (see BusConfig.MaxAttempts).
					rm.Attempts = 0
				}
				retries = append(retries, rm)
				ack.Retrying = true
			}
		}
		return ack
	}
	for i := 0; i < len(subs); {
		// A run of continueAll subscriptions cannot stop propagation, so
		// its deliveries go out at once; their acks keep the order.
		if j := i; subs[j].policy == PolicyContinueAll {
			for j < len(subs) && subs[j].policy == PolicyContinueAll {
				j++
			}
			if j-i > 1 {
				prs, errs := make([]ProcessResult, j-i), make([]error, j-i)
				var wg sync.WaitGroup
				for k := i; k < j; k++ {
					wg.Go(func() { prs[k-i], errs[k-i] = b.deliver(ctx, subs[k], msg) })
				}
				wg.Wait()
				for k := i; k < j; k++ {
					res.Acks = append(res.Acks, outcome(subs[k], prs[k-i], errs[k-i]))
				}
				i = j
				continue
			}
		}
		s := subs[i]
		pr, err := b.deliver(ctx, s, msg)
		res.Acks = append(res.Acks, outcome(s, pr, err))
		i++
		if err == nil && b.stops(s.policy, pr) {
			res.StopPropagation = true
			break
		}
	}
	if meshDone != nil {
		if ack, ok := <-meshDone; ok {
			res.Acks = append(res.Acks, ack)
		}
	}
	res.Success = len(res.Acks) > 0
	if local && len(subs) == 0 && !res.Success {
		if d := b.defaultHandler(msg.Topic); d != nil {
			pr, err := b.deliver(ctx, d, msg)
			ack := Ack{ClientID: d.client.id, Processed: err == nil && pr.Processed, Message: pr.Message}
			if err != nil {
				ack.Message = err.Error()
			}
			if err != nil || pr.ShouldRetry {
				// The default handler has wired up a subscriber (or will):
				// the retry routes the message afresh.
				if rm, ok := b.retryFor(msg, "", pr, err); ok {
					retries = append(retries, rm)
					ack.Retrying = true
				}
			}
			res.Acks = append(res.Acks, ack)
			res.Success = true
		}
	}
	// Acknowledge only what is on disk: retries are in the outbox before
	// the answer leaves.
	for _, rm := range retries {
		if err := b.store.Enqueue(ctx, rm); err != nil {
			return res, fmt.Errorf("persist retry: %w", err)
		}
	}
	if len(retries) > 0 {
		b.wake()
	}
	if local && !res.Success && b.store != nil {
		if err := b.store.DeadLetter(ctx, msg, "no subscriber and no default handler"); err != nil {
			return res, fmt.Errorf("persist dead letter: %w", err)
		}
	}
	b.record(msg)
	return res, nil
}

// stops applies a subscription's policy to its subscriber's answer.
func (b *bus) stops(p Policy, pr ProcessResult) bool {
	switch p {
	case PolicyContinueAll:
		return false
	case PolicyStopOnStop:
		return pr.StopPropagation
	}
	return pr.Processed || pr.StopPropagation
}

// retryFor builds the outbox entry retrying msg for one client ("" routes
// afresh), or false without a store.
func (b *bus) retryFor(msg store.Message, clientID string, pr ProcessResult, err error) (store.Message, bool) {
	if b.store == nil {
		return store.Message{}, false
	}
	rm := msg
	rm.ID = msg.ID + "." + hex.EncodeToString([]byte(clientID))
	rm.To = clientID
	rm.Attempts = 1
	rm.Expires = msg.Time.Add(b.cfg.MessageTTL)
	wait := b.cfg.RetryBackoff
	if err == nil && pr.RetrySeconds > 0 {
		wait = min(time.Duration(pr.RetrySeconds)*time.Second, b.cfg.MaxBackoff)
	}
	rm.NextAttempt = b.now().Add(wait)
	if err != nil {
		rm.LastError = err.Error()
	} else {
		rm.LastError = "should_retry: " + pr.Message
	}
	return rm, true
}

// record writes a message to history, in the background: history is not
// part of what sendMessage acknowledges.
func (b *bus) record(msg store.Message) {
	if b.store == nil {
		return
	}
	select {
	case b.historyQ <- msg: // blocks only when the writers fall behind
	case <-b.ctx.Done():
		b.recordNow(context.Background(), msg)
	}
}

// History is written by writers of its own, so that no sendMessage waits
// for an fsync; each commit carries one record per writer waiting, so
// there are enough of them to fill a group commit (4 writers: about 3,500
// messages/s with 10 subscribers in BenchmarkBusRoundTrip; 32: about
// 4,000, against 5,000 without a store).
const (
	historyQueue   = 4096
	historyWriters = 32
)

func (b *bus) historyLoop() {
	for {
		select {
		case m := <-b.historyQ:
			// Not b.ctx: a record taken before Close began is still
			// written, like those left in the queue.
			b.recordNow(context.Background(), m)
		case <-b.ctx.Done():
			for { // what was queued before Close is still written
				select {
				case m := <-b.historyQ:
					b.recordNow(context.Background(), m)
				default:
					return
				}
			}
		}
	}
}

func (b *bus) recordNow(ctx context.Context, m store.Message) {
	if err := b.store.Record(ctx, m); err != nil {
		b.log.Warn("history not recorded", "id", m.ID, "err", err)
	}
}

// deliver sends one message to one subscription's client: processMessage,
// or sendMessage for a client that does not know processMessage.
func (b *bus) deliver(ctx context.Context, s *subscription, msg store.Message) (ProcessResult, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.DeliveryTimeout)
	defer cancel()
	params := ProcessParams{Topic: msg.Topic, Payload: msg.Payload}
	s.client.mu.Lock()
	legacy := s.client.legacy
	s.client.mu.Unlock()
	method := MethodProcessMessage
	if legacy {
		method = MethodSendMessage
	}
	var pr ProcessResult
	err := s.conn.Call(ctx, method, params, &pr)
	var re *rpc.Error
	if !legacy && errors.As(err, &re) && re.Code == rpc.CodeMethodNotFound {
		s.client.mu.Lock()
		s.client.legacy = true
		s.client.mu.Unlock()
		pr = ProcessResult{}
		err = s.conn.Call(ctx, MethodSendMessage, params, &pr)
	}
	if err != nil {
		return ProcessResult{}, fmt.Errorf("delivery to %s failed: %w", s.client.id, err)
	}
	if pr.Success != nil && !pr.Processed {
		pr.Processed = *pr.Success
	}
	return pr, nil
}

// toMeshAgent calls a mesh agent for a topic agent:<id> naming one: the
// payload's "type" is the capability, the payload the params.
func (b *bus) toMeshAgent(ctx context.Context, msg store.Message) (Ack, bool) {
	id, ok := strings.CutPrefix(msg.Topic, "agent:")
	if !ok {
		return Ack{}, false
	}
	pid, err := sign.ParseAgentID(id)
	if err != nil || pid.String() == b.mesh.AgentID() {
		return Ack{}, false
	}
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(msg.Payload, &p)
	ack := Ack{ClientID: pid.String()}
	if p.Type == "" {
		ack.Message = `the payload has no "type": it names the capability to call on a mesh agent`
		return ack, true
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.DeliveryTimeout)
	defer cancel()
	resp, err := b.mesh.Call(ctx, protocol.CallRequest{To: pid.String(), Action: p.Type, Params: msg.Payload, Timeout: b.cfg.DeliveryTimeout})
	if err != nil {
		pe := protocol.AsError(err)
		ack.Message = string(pe.Code) + ": " + pe.Message
		return ack, true
	}
	ack.Processed = resp.Status == protocol.StatusSuccess
	ack.Message = compactResult(resp.Result)
	return ack, true
}

func compactResult(raw json.RawMessage) string {
	if len(raw) > 4096 {
		return string(raw[:4096]) + "…"
	}
	return string(raw)
}

// toMesh publishes a local message to the mesh. In the background it
// returns nil and reports nothing; otherwise the channel yields an ack
// when the message reached topic peers within MeshWait (nothing when there
// were none, or the mesh has no topics).
func (b *bus) toMesh(ctx context.Context, msg store.Message, background bool) chan Ack {
	pub, ok := b.mesh.(rpc.Publisher)
	if !ok || strings.HasPrefix(msg.Topic, protocol.PresenceFamily+":") {
		return nil
	}
	wait := b.cfg.MeshWait
	if background {
		ctx, wait = b.ctx, 10*time.Second // outlives the request
	}
	// The copy comes back through this bus's own mesh subscriptions,
	// if any match: its id tells fromMesh it was delivered here already.
	publish := pub.Publish
	if ip, ok := pub.(rpc.IDPublisher); ok {
		id := protocol.NewID()
		b.seen.add(meshKey(b.mesh.AgentID(), id))
		publish = func(ctx context.Context, topic string, payload json.RawMessage, filter *protocol.Filter) (int, error) {
			return ip.PublishID(ctx, id, topic, payload, filter)
		}
	}
	out := make(chan Ack, 1)
	b.wg.Go(func() {
		defer close(out)
		ctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		n, err := publish(ctx, msg.Topic, msg.Payload, nil)
		if err != nil || n == 0 {
			return
		}
		out <- Ack{ClientID: "mesh", Processed: true, Message: fmt.Sprintf("published to %d mesh peers", n)}
	})
	if background {
		return nil
	}
	return out
}

// fromMesh delivers a mesh message to local subscribers: one published
// by another agent, or by this node other than through this bus
// (mesh.publish, the CLI's publish, Node.Publish). It comes once per local
// pattern that matches it and is dispatched once; the bus's own messages
// were delivered locally already and are recognised by their id.
func (b *bus) fromMesh(m protocol.TopicMessage) {
	if _, ok := b.mesh.(rpc.IDPublisher); !ok && m.From == b.mesh.AgentID() {
		return // perhaps the bus's own: see rpc.IDPublisher
	}
	if !b.seen.add(meshKey(m.From, m.ID)) {
		return
	}
	msg := store.Message{ID: newMessageID(), Topic: m.Topic, From: m.From, Payload: m.Payload, Time: m.Time, ConversationID: conversationOf(m.Payload)}
	// Deliveries can wait on slow subscribers: never on the mesh's
	// goroutine.
	b.lmu.Lock()
	closed := b.closed
	if !closed {
		b.wg.Add(1)
	}
	b.lmu.Unlock()
	if closed {
		return
	}
	go func() {
		defer b.wg.Done()
		if _, err := b.dispatch(b.ctx, msg, false); err != nil && b.ctx.Err() == nil {
			b.log.Warn("mesh message not delivered", "topic", m.Topic, "err", err)
		}
	}()
}

func (b *bus) wake() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// wakeClient makes what waits in the outbox for a client that has just
// subscribed due now, and wakes the retry loop to deliver it.
func (b *bus) wakeClient(id string) {
	if b.store == nil {
		return
	}
	n, err := b.store.Wake(b.ctx, id, b.now())
	if err != nil {
		if b.ctx.Err() == nil {
			b.log.Warn("outbox not woken", "client", id, "err", err)
		}
		return
	}
	if n > 0 {
		b.log.Debug("client back: its waiting messages are due", "client", id, "messages", n)
		b.wake()
	}
}

// Bounds of the retry loop: it takes at most retryBatch messages per
// pass, and sleeps until the next attempt is due, or at most maxRetrySleep
// (a bound in case the store is written by something that does not wake
// this loop) or until woken by a new retry, a replay or a subscribe.
const (
	retryBatch    = 64
	maxRetrySleep = time.Minute
)

// retryLoop delivers the outbox: retries whose time has come, replayed
// dead letters, what waited for a subscriber that is back, and what a
// restart found waiting.
func (b *bus) retryLoop() {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		case <-b.kick:
		}
		due, err := b.store.Due(b.ctx, b.now(), retryBatch)
		if err != nil && b.ctx.Err() == nil {
			b.log.Warn("outbox unreadable", "err", err)
		}
		for _, m := range due {
			b.retry(m)
		}
		sleep := maxRetrySleep
		switch next, ok, err := b.store.NextDue(b.ctx); {
		case len(due) == retryBatch:
			sleep = 0 // more may be due
		case err != nil:
			if b.ctx.Err() == nil {
				b.log.Warn("outbox unreadable", "err", err)
			}
		case ok:
			sleep = min(max(next.Sub(b.now()), 0), maxRetrySleep)
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(sleep)
	}
}

// retry makes one more attempt at an outbox message.
func (b *bus) retry(m store.Message) {
	ctx := b.ctx
	now := b.now()
	if !m.Expires.IsZero() && !now.Before(m.Expires) {
		b.deadLetter(m, fmt.Sprintf("TTL expired: not delivered within %s (subscriber %s away; sent %s)",
			b.cfg.MessageTTL, orAny(m.To), m.Time.UTC().Format(time.RFC3339)), m.LastError)
		return
	}
	var (
		pr     ProcessResult
		err    error
		absent bool
	)
	if m.To == "" {
		subs := b.route(m.Topic)
		if len(subs) == 0 {
			err = errors.New("no subscriber")
		}
		for _, s := range subs {
			var e error
			if pr, e = b.deliver(ctx, s, m); e != nil || pr.ShouldRetry {
				err = errors.Join(err, e)
			}
			if e == nil && b.stops(s.policy, pr) {
				break
			}
		}
	} else if s := b.subscriptionOf(m.To, m.Topic); s != nil {
		pr, err = b.deliver(ctx, s, m)
		// A connection that ended during the attempt is an absence too.
		absent = err != nil && s.conn.Context().Err() != nil
	} else {
		absent = true
	}
	if ctx.Err() != nil {
		return
	}
	if absent {
		b.await(m, now)
		return
	}
	if err == nil && !pr.ShouldRetry {
		if err := b.store.Delivered(ctx, m.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
			b.log.Warn("outbox not updated", "id", m.ID, "err", err)
		}
		return
	}
	why := "should_retry: " + pr.Message
	if err != nil {
		why = err.Error()
	}
	if m.Attempts+1 >= b.cfg.MaxAttempts {
		m.Attempts++
		b.deadLetter(m, fmt.Sprintf("gave up after %d attempts: %s", m.Attempts, why), why)
		return
	}
	wait := min(b.cfg.RetryBackoff<<m.Attempts, b.cfg.MaxBackoff)
	if err == nil && pr.RetrySeconds > 0 {
		wait = min(time.Duration(pr.RetrySeconds)*time.Second, b.cfg.MaxBackoff)
	}
	if err := b.store.Retry(ctx, m.ID, why, now.Add(wait)); err != nil {
		b.log.Warn("outbox not updated", "id", m.ID, "err", err)
	}
}

// await keeps a message whose subscriber is away in the outbox without
// counting an attempt, until the subscriber subscribes again (subscribe
// wakes it through wakeClient) or the message expires (when the retry
// loop dead-letters it). A message with no expiry (replayed, or queued by
// an older version) gets MessageTTL from now.
func (b *bus) await(m store.Message, now time.Time) {
	expires := m.Expires
	if expires.IsZero() {
		expires = now.Add(b.cfg.MessageTTL)
	}
	why := fmt.Sprintf("waiting for client %s to subscribe to %s", m.To, m.Topic)
	if err := b.store.Postpone(b.ctx, m.ID, why, expires, expires); err != nil {
		if !errors.Is(err, store.ErrNotFound) && b.ctx.Err() == nil {
			b.log.Warn("outbox not updated", "id", m.ID, "err", err)
		}
		return
	}
	b.log.Debug("subscriber away: message waits", "id", m.ID, "client", m.To, "until", expires)
	// The client may have subscribed between the attempt and the
	// postponement, and its wake found the message still due.
	if b.subscriptionOf(m.To, m.Topic) != nil {
		b.wakeClient(m.To)
	}
}

func orAny(client string) string {
	if client == "" {
		return "(any)"
	}
	return client
}

// deadLetter gives up on an outbox message.
func (b *bus) deadLetter(m store.Message, reason, lastError string) {
	m.LastError = lastError
	if err := b.store.DeadLetter(b.ctx, m, reason); err != nil {
		b.log.Warn("dead letter not stored", "id", m.ID, "err", err)
		return
	}
	b.log.Info("message dead-lettered", "id", m.ID, "topic", m.Topic, "client", m.To, "attempts", m.Attempts, "reason", reason)
}
