package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/metrics"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// MessageDLQTopic is the dead-letter topic of direct messages (seed 004).
const MessageDLQTopic = "agent.messages.dlq"

// MessageHandler processes a direct message. Its result is the response
// when the message requires one. It must be idempotent in spirit: the node
// already drops duplicates by message id, but only for a while.
type MessageHandler func(ctx context.Context, from peer.ID, m protocol.AgentMessage) (json.RawMessage, error)

// Delivery of direct messages.
const (
	// MessageAttempts is how many times SendMessage tries (seed 004: a
	// message goes to the dead-letter queue after 3 attempts).
	MessageAttempts = 3
	// dedupTTL is how long a receiver remembers a message id.
	dedupTTL = 10 * time.Minute
	// maxDedup bounds the ids remembered.
	maxDedup = 16384
)

// OnMessage sets the handler of direct messages (nil: messages are
// accepted and logged, and one that requires a response is refused).
func (n *Node) OnMessage(h MessageHandler) {
	n.inbox.mu.Lock()
	n.inbox.handler = h
	n.inbox.mu.Unlock()
	if h != nil && n.mailboxes != nil {
		// What a mailbox kept for want of a handler can come now.
		n.mailboxes.wake()
	}
}

// SendMessage delivers a direct message to agent to, at least once: up to
// MessageAttempts attempts with a doubling backoff, each bounded by
// attemptTimeout (0: the node's request timeout); refusals that a retry
// cannot fix (UNAUTHORIZED, INVALID_MESSAGE) are returned at once. The
// receiver processes a message id once, so a retry after a lost answer is
// harmless. It returns the receiver's response (null unless
// RequiresResponse).
//
// When the agent cannot be reached, or is reached but takes no messages
// yet (its program has not attached its handler), and the node has a
// store (WithStore), the message waits in the node's outbox, on disk
// before SendMessage returns, and the error is a *QueuedError matching
// ErrQueued: the outbox delivers it when the agent is seen again, also
// after a restart of this node, and dead-letters it past the TTL
// (WithMessageTTL); its response is not kept. When the outbox does not
// take it (full: ErrOutboxFull; a store that cannot write: store.ErrWrite)
// the error is a *NotKeptError, and nothing is queued. When every attempt
// fails otherwise, the message goes to the dead-letter queue (topic
// agent.messages.dlq in the store) and the error wraps ErrDeadLettered
// (in a *NotKeptError when the dead letter could not be stored).
func (n *Node) SendMessage(ctx context.Context, to string, m protocol.AgentMessage, attemptTimeout time.Duration) (json.RawMessage, error) {
	if m.MessageID == "" {
		m.MessageID = protocol.NewID()
	}
	if m.Priority == "" {
		m.Priority = protocol.PriorityNormal
	}
	if err := m.Validate(); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "%v", err)
	}
	id, err := sign.ParseAgentID(to)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "target agent: %v", err)
	}
	params, err := canonicalMessage(m)
	if err != nil {
		return nil, fmt.Errorf("node: encode message: %w", err)
	}
	backoff := n.cfg.MessageBackoff
	var last error
	for attempt := 1; attempt <= MessageAttempts; attempt++ {
		res, err := n.deliverMessage(ctx, id, params, attemptTimeout)
		if err == nil {
			return res, nil
		}
		last = err
		if refused(err) {
			return nil, err
		}
		if queueable(err) && n.outbox != nil {
			return nil, n.queueMessage(ctx, id.String(), m.MessageID, params, err)
		}
		if ctx.Err() != nil || attempt == MessageAttempts {
			break
		}
		n.log.Debug("message not delivered; retrying", "remote_peer", id, "message_id", m.MessageID, "attempt", attempt, "err", err)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		case <-n.ctx.Done():
			return nil, ErrClosed
		}
		backoff *= 2
	}
	if n.cfg.Store != nil {
		dl := store.Message{ID: m.MessageID, Topic: MessageDLQTopic, From: n.idStr, To: id.String(), Payload: params, Metadata: messageMeta, Attempts: MessageAttempts, LastError: last.Error(), Queue: outboxQueue}
		if err := n.cfg.Store.DeadLetter(context.WithoutCancel(ctx), dl, fmt.Sprintf("gave up after %d attempts: %v", MessageAttempts, last)); err != nil {
			return nil, &NotKeptError{Cause: fmt.Errorf("%w (%v)", ErrDeadLettered, last), Err: fmt.Errorf("store the dead letter: %w", err)}
		}
	}
	return nil, fmt.Errorf("%w after %d attempts: %w", ErrDeadLettered, MessageAttempts, last)
}

// sortedMessage is an AgentMessage with its members in canonical (RFC
// 8785) order, so that encoding/json writes it canonical unless its
// context or strings need more than that.
type sortedMessage struct {
	Body             string          `json:"body"`
	Context          json.RawMessage `json:"context,omitempty"`
	MessageID        string          `json:"message_id"`
	Priority         string          `json:"priority,omitempty"`
	RequiresResponse bool            `json:"requires_response,omitempty"`
	Subject          string          `json:"subject"`
}

// canonicalMessage encodes m canonical, once per message, so that
// neither a lone request nor a batch encodes it again: encoding/json's
// bytes when they are canonical already (one scan), else a
// canonicalisation of them.
func canonicalMessage(m protocol.AgentMessage) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(sortedMessage{Body: m.Body, Context: m.Context, MessageID: m.MessageID, Priority: m.Priority, RequiresResponse: m.RequiresResponse, Subject: m.Subject}); err != nil {
		return nil, err
	}
	return protocol.MarshalCanonical(json.RawMessage(bytes.TrimSuffix(buf.Bytes(), []byte("\n"))))
}

// messageMeta is the outbox metadata of a direct message: replayed, a dead
// letter of SendMessage goes out through the outbox.
var messageMeta = json.RawMessage(`{"action":"` + protocol.MessageCapability + `"}`)

// queueMessage puts a direct message whose attempt found its agent away in
// the outbox, and returns the *QueuedError that says so, or a
// *NotKeptError when the outbox did not take it.
func (n *Node) queueMessage(ctx context.Context, to, id string, params json.RawMessage, cause error) error {
	q, err := n.queue(ctx, store.Message{ID: id, Topic: "agent:" + to, To: to, Payload: params}, protocol.MessageCapability, cause.Error())
	if err != nil {
		return &NotKeptError{Cause: cause, Err: err}
	}
	n.log.Info("message queued: agent away", "remote_peer", to, "message_id", id, "until", q.Expires, "err", cause)
	return &QueuedError{MessageID: id, To: to, Expires: q.Expires, Cause: cause, Mailbox: q.Mailbox, MailboxErr: q.MailboxErr}
}

// inflight is one message id being processed or recently processed.
type inflight struct {
	done chan struct{}
	at   time.Time
	res  json.RawMessage
	err  error
}

// inbox is the receiving side of direct messages, under its own lock: the
// handler, and the message ids recently processed, per sender.
type inbox struct {
	mu      sync.Mutex
	handler MessageHandler
	m       map[string]*inflight
}

// receiveMessage serves agent.message: each (sender, message id) is
// processed once; a duplicate waits for, and gets, the first one's answer.
// The handler runs under the node's context (bounded by HandlerTimeout),
// not the request's, so that a retry after the caller gave up finds the
// work done rather than cancelled.
func (n *Node) receiveMessage(ctx context.Context, from peer.ID, req *protocol.Request) (json.RawMessage, error) {
	var m protocol.AgentMessage
	if err := protocol.DecodePayload(req.Params, "agent message params", &m); err != nil {
		return nil, err
	}
	f, err := n.beginMessage(from, m)
	if err != nil {
		return nil, err
	}
	return waitMessage(ctx, f, m.MessageID)
}

// receiveMessages serves agent.messages, a batch of direct messages: each
// is processed as agent.message would process it alone, all at once, and
// the answer has each one's outcome in order. Every message after the
// first takes a token of the requester's rate limit (and of its policy
// rule's): one refused is answered RATE_LIMITED on its own.
func (n *Node) receiveMessages(ctx context.Context, c *Call) (json.RawMessage, error) {
	var b protocol.MessageBatch
	if err := protocol.DecodePayload(c.Request.Params, "agent message batch params", &b); err != nil {
		return nil, err
	}
	if len(b.Messages) == 0 || len(b.Messages) > protocol.MaxMessageBatch {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "a batch holds 1 to %d messages, not %d", protocol.MaxMessageBatch, len(b.Messages))
	}
	out := protocol.MessageBatchResult{Results: make([]protocol.MessageOutcome, len(b.Messages))}
	started := make([]*inflight, len(b.Messages))
	ids := make([]string, len(b.Messages))
	rule := n.policy.Load().rule(c.From)
	for i, raw := range b.Messages {
		var err error
		if i > 0 && !n.limiter.allow(c.From) {
			n.refused(metrics.RefusedRateLimit)
			err = protocol.Errorf(protocol.CodeRateLimited, "more than %g requests per second (burst %d) from %s", n.cfg.Limits.RequestsPerSecond, n.cfg.Limits.Burst, c.From)
		} else if i > 0 {
			err = rule.admitRate(c.From)
		}
		var m protocol.AgentMessage
		if err == nil {
			err = protocol.DecodePayload(raw, "a batch's agent message", &m)
		}
		if err == nil {
			ids[i] = m.MessageID
			started[i], err = n.beginMessage(c.From, m)
		}
		if err != nil {
			out.Results[i].Error = protocol.AsError(err)
		}
	}
	for i, f := range started {
		if f == nil {
			continue
		}
		res, err := waitMessage(ctx, f, ids[i])
		if err != nil {
			out.Results[i].Error = protocol.AsError(err)
			continue
		}
		out.Results[i].Result = res
	}
	// Canonical as written unless an answer or an error needs more:
	// execute's canonicalisation then only scans it.
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "encode the batch's outcomes: %v", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// beginMessage starts processing a direct message from from, once per
// (sender, message id): it returns the message's inflight, the one
// already started for a duplicate.
func (n *Node) beginMessage(from peer.ID, m protocol.AgentMessage) (*inflight, error) {
	if err := m.Validate(); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "%v", err)
	}
	key := string(from) + "\x00" + m.MessageID // the id's bytes: no encoding
	now := time.Now()
	d := &n.inbox
	d.mu.Lock()
	if d.m == nil {
		d.m = map[string]*inflight{}
	}
	f, dup := d.m[key]
	if !dup {
		if len(d.m) >= maxDedup {
			d.evict(now)
		}
		f = &inflight{done: make(chan struct{}), at: now}
		d.m[key] = f
	}
	h := d.handler
	d.mu.Unlock()
	if dup {
		n.log.Debug("duplicate message", "remote_peer", from, "message_id", m.MessageID)
		return f, nil
	}
	// Run the handler on a node-owned goroutine, detached from this
	// request.
	if !n.goTracked(func() {
		defer close(f.done)
		hctx, cancel := context.WithTimeout(n.ctx, n.cfg.Limits.HandlerTimeout)
		defer cancel()
		switch {
		case h != nil:
			f.res, f.err = h(hctx, from, m)
		case m.RequiresResponse:
			f.err = protocol.Errorf(protocol.CodeCapabilityNotSupported, "agent takes no messages that need a response")
		default:
			n.log.Info("message", "remote_peer", from, "message_id", m.MessageID, "subject", m.Subject, "priority", m.Priority)
		}
		if f.err != nil {
			// A failure is not remembered: the sender's retry runs it again.
			d.mu.Lock()
			if d.m[key] == f {
				delete(d.m, key)
			}
			d.mu.Unlock()
		}
	}) {
		return nil, ErrClosed
	}
	return f, nil
}

// evict makes room in a full inbox: it forgets the processed ids older
// than dedupTTL, and, while that is not an eighth of the bound, processed
// ids in map order, so that the next maxDedup/8 messages do not each scan
// the whole map. Called with mu held.
func (d *inbox) evict(now time.Time) {
	target := maxDedup - maxDedup/8
	for k, old := range d.m {
		select {
		case <-old.done:
			if now.Sub(old.at) > dedupTTL || len(d.m) > target {
				delete(d.m, k)
			}
		default:
		}
	}
}

// waitMessage waits for a message begun by beginMessage and returns its
// answer (null when the handler returned none).
func waitMessage(ctx context.Context, f *inflight, id string) (json.RawMessage, error) {
	select {
	case <-f.done:
		if f.res == nil && f.err == nil {
			return json.RawMessage("null"), nil
		}
		return f.res, f.err
	case <-ctx.Done():
		return nil, protocol.Errorf(protocol.CodeTimeout, "message %s is still being processed", id)
	}
}
