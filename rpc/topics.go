package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// Publisher is a mesh's topics (*node.Node is one), which a server
// serves when built WithTopics. A server without them answers
// mesh.publish, mesh.subscribe and mesh.unsubscribe with -32601.
// Implementations must be safe for concurrent use.
type Publisher interface {
	// Publish sends payload to every agent subscribed to topic, this
	// node's own subscriptions (made with Subscribe) included, applying
	// filter (nil: everyone), and returns how many receivers it went to:
	// topic peers plus local subscriptions; errors.Is(err,
	// protocol.ErrNoPeers) when there is none within the publish wait.
	// payload is a JSON object (the server refuses anything else before
	// calling Publish).
	Publish(ctx context.Context, topic string, payload json.RawMessage, filter *protocol.Filter) (int, error)
	// Subscribe calls handler in order for each message whose topic
	// matches pattern (exact, an fnmatch wildcard such as "outbound:*",
	// or a prefix ending in ':', '-', '.', '/' or '_'), whether published
	// by another agent or by this node; the returned func cancels the
	// subscription. handler must not block: the server's handler only
	// queues a notification.
	Subscribe(pattern string, handler func(protocol.TopicMessage)) (cancel func(), err error)
}

// IDPublisher is a Publisher that publishes under a message id its caller
// chose (*node.Node is one): what a bus is given to carry its topics
// across the mesh (bus.WithTopics). The bus publishes its clients'
// messages so: it has delivered them to its own subscribers itself, and
// knows them by their id when they come back through its mesh
// subscriptions, while what the node publishes by other ways
// (mesh.publish, Node.Publish) reaches the bus's subscribers.
type IDPublisher interface {
	Publisher
	// PublishID is Publish under message (envelope) id id, a fresh
	// protocol.NewID(). Its count leaves out the subscriptions made with
	// SubscribeOwn: a node's own bus is never a mesh delivery.
	PublishID(ctx context.Context, id, topic string, payload json.RawMessage, filter *protocol.Filter) (int, error)
	// SubscribeOwn is Subscribe for the caller of PublishID, which drops
	// the messages it published when they come back.
	SubscribeOwn(pattern string, handler func(protocol.TopicMessage)) (cancel func(), err error)
}

// DurableSubscriber runs a mesh's durable subscriptions (*node.Node is
// one), which a server serves when built WithDurables. A server without
// it refuses mesh.subscribe with "durable" (-32602). Implementations must
// be safe for concurrent use.
type DurableSubscriber interface {
	// SubscribeDurable is Subscribe under a name whose position the mesh
	// remembers: a later call with the name first delivers, in order,
	// what was published since (fetched from history keepers, the first
	// fetch within ctx), then the live messages. handler is called one
	// message at a time and may block; a message counts as delivered
	// only when it returns nil, and an error stops the subscription so
	// that the next one of the name starts with that message. handler's
	// ctx ends when the subscription is cancelled. handler is first
	// called after SubscribeDurable has returned. errors.Is(err,
	// protocol.ErrNoPeers) when no keeper answered; a refused name or
	// pattern is a *protocol.Error with INVALID_MESSAGE.
	SubscribeDurable(ctx context.Context, pattern, name string, handler func(context.Context, protocol.TopicMessage) error) (cancel func(), err error)
}

// WithTopics serves mesh.publish, mesh.subscribe and mesh.unsubscribe,
// and seed 004's broadcasts and notifications, through p (usually the
// server's Mesh itself: rpc.New(n, rpc.WithTopics(n))). A nil p is
// refused.
func WithTopics(p Publisher) Option {
	return func(cfg *Config) error {
		if p == nil {
			return errors.New("nil Publisher")
		}
		cfg.Topics = p
		return nil
	}
}

// WithDurables serves mesh.subscribe with "durable" through d. It needs
// WithTopics too (New refuses it alone). A nil d is refused.
func WithDurables(d DurableSubscriber) Option {
	return func(cfg *Config) error {
		if d == nil {
			return errors.New("nil DurableSubscriber")
		}
		cfg.Durables = d
		return nil
	}
}

// DurableCatchUpTimeout bounds the first fetch of a durable mesh.subscribe,
// made before its answer (the messages follow, each answered by the client).
const DurableCatchUpTimeout = time.Minute

// Method names of mesh topics.
const (
	MethodMeshPublish     = "mesh.publish"
	MethodMeshSubscribe   = "mesh.subscribe"
	MethodMeshUnsubscribe = "mesh.unsubscribe"
	// MethodMeshMessage carries each message of a mesh.subscribe
	// subscription: a notification, or for a durable subscription a
	// request the client answers once it has processed the message.
	MethodMeshMessage = "mesh.message"
)

// Bounds of mesh topics on one connection.
const (
	// MaxMeshSubscriptions bounds a connection's mesh.subscribe
	// subscriptions.
	MaxMeshSubscriptions = 64
	// DefaultPublishTimeout bounds mesh.publish when the client gives no
	// timeoutMs; MaxPublishTimeout is the most it may ask for.
	DefaultPublishTimeout = 10 * time.Second
	MaxPublishTimeout     = 5 * time.Minute
	// MaxTopicLen bounds a topic or pattern, in bytes.
	MaxTopicLen = 1024
)

// PublishParams are the params of mesh.publish. The server also reads
// Filter's members in seed 004's snake_case (see filterWire).
type PublishParams struct {
	Topic     string           `json:"topic,required"`
	Payload   json.RawMessage  `json:"payload"`
	Filter    *protocol.Filter `json:"filter,omitempty"`
	TimeoutMS int64            `json:"timeoutMs,omitempty"`
}

// PublishResult is the result of mesh.publish: how many topic peers the
// message went to.
type PublishResult struct {
	Topic string `json:"topic"`
	Peers int    `json:"peers"`
}

// SubscribeParams are the params of mesh.subscribe.
type SubscribeParams struct {
	Pattern string `json:"pattern,required"`
	// Durable names a durable subscription: it catches up on what was
	// published while it was away before the live messages, each a
	// mesh.message request the client answers (the first may come
	// before the answer to mesh.subscribe).
	Durable string `json:"durable,omitempty"`
}

// SubscribeResult is the result of mesh.subscribe.
type SubscribeResult struct {
	Subscription string `json:"subscription"`
}

// UnsubscribeParams are the params of mesh.unsubscribe.
type UnsubscribeParams struct {
	Subscription string `json:"subscription,required"`
}

// MessageParams are the params of mesh.message (a notification, or a
// request for a durable subscription).
type MessageParams struct {
	Subscription string                `json:"subscription"`
	Message      protocol.TopicMessage `json:"message"`
}

// publishWire is what mesh.publish reads: PublishParams, with timeoutMs a
// pointer because an explicit 0 is an error where absence is the default,
// and the filter in either spelling.
type publishWire struct {
	PublishParams
	Filter    *filterWire `json:"filter"`
	TimeoutMS *int64      `json:"timeoutMs"`
}

var (
	publishShape = func() paramShape {
		s := objectShape(MethodMeshPublish, &PublishParams{})
		s.member = publishMember
		return s
	}()
	subscribeShape   = objectShape(MethodMeshSubscribe, &SubscribeParams{})
	unsubscribeShape = objectShape(MethodMeshUnsubscribe, &UnsubscribeParams{})
)

// publishMember words what is wrong with mesh.publish's filter or timeout.
func publishMember(fe *protocol.FieldError) error {
	switch {
	case under(fe, "filter"):
		return filterError()
	case under(fe, "timeoutMs"):
		return publishTimeoutError()
	}
	return nil
}

func publishTimeoutError() error {
	return Errorf(CodeInvalidParams, `invalid params: "timeoutMs" must be a whole number of milliseconds from 1 to %d`, MaxPublishTimeout.Milliseconds())
}

func payloadError() error {
	return Errorf(CodeInvalidParams, `invalid params: "payload" is required and must be a JSON object`)
}

func parsePublishParams(raw json.RawMessage) (PublishParams, time.Duration, error) {
	var w publishWire
	if err := publishShape.decode(raw, &w); err != nil {
		return PublishParams{}, 0, err
	}
	p := w.PublishParams
	if err := nonEmpty("topic", p.Topic); err != nil {
		return p, 0, err
	}
	f, err := w.Filter.filter()
	if err != nil {
		return p, 0, err
	}
	p.Filter = f
	if len(p.Payload) == 0 || p.Payload[0] != '{' {
		return p, 0, payloadError()
	}
	timeout := DefaultPublishTimeout
	if w.TimeoutMS != nil {
		ms := *w.TimeoutMS
		if ms <= 0 || ms > MaxPublishTimeout.Milliseconds() {
			return p, 0, publishTimeoutError()
		}
		p.TimeoutMS = ms
		timeout = time.Duration(ms) * time.Millisecond
	}
	return p, timeout, nil
}

// meshPublish serves mesh.publish.
func (s *Server) meshPublish(ctx context.Context, r *Request) (any, error) {
	pub := s.cfg.Topics
	if pub == nil {
		return nil, noTopicsError(r.Method)
	}
	p, timeout, err := parsePublishParams(r.Params)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	n, err := pub.Publish(ctx, p.Topic, p.Payload, p.Filter)
	switch {
	case errors.Is(err, protocol.ErrNoPeers):
		return nil, Errorf(CodeNoPeers, "no agent subscribes to %q: %v", p.Topic, err)
	case err != nil:
		return nil, protocol.AsError(err)
	}
	return PublishResult{Topic: p.Topic, Peers: n}, nil
}

// noTopicsError answers a topic method on a server built without
// WithTopics.
func noTopicsError(method string) error {
	return Errorf(CodeMethodNotFound, "method not found: %s (this node has no topics)", method)
}

// meshSubs are one connection's mesh subscriptions.
type meshSubs struct {
	mu     sync.Mutex
	next   int
	closed bool
	cancel map[string]func()
}

type meshSubsKey struct{}

// subsOf returns the connection's subscriptions, creating them (and the
// hook that cancels them all when the connection closes) on first use.
func subsOf(c *Conn) *meshSubs {
	c.mu.Lock()
	if v, ok := c.values[meshSubsKey{}].(*meshSubs); ok {
		c.mu.Unlock()
		return v
	}
	subs := &meshSubs{cancel: map[string]func(){}}
	if c.values == nil {
		c.values = make(map[any]any)
	}
	c.values[meshSubsKey{}] = subs
	c.mu.Unlock()
	c.AfterClose(subs.closeAll)
	return subs
}

// closeAll cancels every subscription; later subscribes fail.
func (m *meshSubs) closeAll() {
	m.mu.Lock()
	cancels := slices.Collect(maps.Values(m.cancel))
	m.cancel, m.closed = nil, true
	m.mu.Unlock()
	for _, cancel := range cancels {
		cancel()
	}
}

// meshSubscribe serves mesh.subscribe. Messages are queued to the client
// as mesh.message notifications without blocking the mesh: a client that
// does not read them is disconnected as a slow consumer, which cancels its
// subscriptions.
func (s *Server) meshSubscribe(ctx context.Context, r *Request) (any, error) {
	pub := s.cfg.Topics
	if pub == nil {
		return nil, noTopicsError(r.Method)
	}
	var p SubscribeParams
	if err := subscribeShape.decode(r.Params, &p); err != nil {
		return nil, err
	}
	if err := nonEmpty("pattern", p.Pattern); err != nil {
		return nil, err
	}
	pattern := p.Pattern
	if p.Durable != "" {
		if err := nonEmpty("durable", p.Durable); err != nil {
			return nil, err
		}
		return s.meshSubscribeDurable(ctx, r, pattern, p.Durable)
	}
	subs := subsOf(r.Conn)
	subs.mu.Lock()
	defer subs.mu.Unlock()
	if subs.closed {
		return nil, ErrClosed
	}
	if len(subs.cancel) >= MaxMeshSubscriptions {
		return nil, Errorf(CodeInvalidParams, "invalid params: this connection already has %d mesh subscriptions, the most allowed; unsubscribe first", MaxMeshSubscriptions)
	}
	subs.next++
	id := "s" + strconv.Itoa(subs.next)
	conn := r.Conn
	cancel, err := pub.Subscribe(pattern, func(m protocol.TopicMessage) {
		_ = conn.Notify(MethodMeshMessage, MessageParams{Subscription: id, Message: m})
	})
	if err != nil {
		return nil, MeshParamsError(err)
	}
	subs.cancel[id] = cancel
	return SubscribeResult{Subscription: id}, nil
}

// meshUnsubscribe serves mesh.unsubscribe.
func (s *Server) meshUnsubscribe(_ context.Context, r *Request) (any, error) {
	if s.cfg.Topics == nil {
		return nil, noTopicsError(r.Method)
	}
	var p UnsubscribeParams
	if err := unsubscribeShape.decode(r.Params, &p); err != nil {
		return nil, err
	}
	if err := nonEmpty("subscription", p.Subscription); err != nil {
		return nil, err
	}
	id := p.Subscription
	subs := subsOf(r.Conn)
	subs.mu.Lock()
	cancel, ok := subs.cancel[id]
	delete(subs.cancel, id)
	subs.mu.Unlock()
	if !ok {
		return nil, Errorf(CodeInvalidParams, "invalid params: no mesh subscription %q on this connection", id)
	}
	cancel()
	return true, nil
}

// meshSubscribeDurable serves mesh.subscribe with "durable". Each message
// goes to the client as a mesh.message request, one at a time, and the
// subscription's position advances only when the client answers it: a
// message the client did not answer is delivered again on the next
// subscription of the name. The wait for an answer lasts as long as the
// connection and the subscription (mesh.unsubscribe ends it); a stuck
// client holds up only this subscription. An error answer stops it.
func (s *Server) meshSubscribeDurable(ctx context.Context, r *Request, pattern, name string) (any, error) {
	ds := s.cfg.Durables
	if ds == nil {
		return nil, Errorf(CodeInvalidParams, "invalid params: this node runs no durable subscriptions")
	}
	subs := subsOf(r.Conn)
	subs.mu.Lock()
	if subs.closed {
		subs.mu.Unlock()
		return nil, ErrClosed
	}
	if len(subs.cancel) >= MaxMeshSubscriptions {
		subs.mu.Unlock()
		return nil, Errorf(CodeInvalidParams, "invalid params: this connection already has %d mesh subscriptions, the most allowed; unsubscribe first", MaxMeshSubscriptions)
	}
	subs.next++
	id := "s" + strconv.Itoa(subs.next)
	subs.cancel[id] = func() {} // holds the place while catching up
	subs.mu.Unlock()
	conn := r.Conn
	ctx, stop := context.WithTimeout(ctx, DurableCatchUpTimeout)
	defer stop()
	// Messages wait for the answer to be on its way, so that a client
	// mostly learns the subscription's id before its first message.
	ready := make(chan struct{})
	defer close(ready)
	cancel, err := ds.SubscribeDurable(ctx, pattern, name, func(ctx context.Context, m protocol.TopicMessage) error {
		select {
		case <-ready:
		case <-ctx.Done():
			return ctx.Err()
		}
		err := conn.Call(ctx, MethodMeshMessage, MessageParams{Subscription: id, Message: m}, nil)
		var re *Error
		if errors.As(err, &re) {
			conn.log.Info("durable subscription stopped: the client did not process a message", "subscription", id, "durable", name, "message_id", m.ID, "error", re.Message)
		}
		return err
	})
	subs.mu.Lock()
	defer subs.mu.Unlock()
	if err != nil {
		delete(subs.cancel, id)
		if errors.Is(err, protocol.ErrNoPeers) {
			return nil, Errorf(CodeNoPeers, "durable %q cannot catch up: %v", name, err)
		}
		return nil, MeshParamsError(err)
	}
	if subs.closed {
		cancel()
		return nil, ErrClosed
	}
	if _, held := subs.cancel[id]; !held {
		// mesh.unsubscribe took the id while the first fetch ran: the
		// subscription ends here rather than live on unknown to the
		// client, holding its name.
		cancel()
		return nil, Errorf(CodeInvalidParams, "invalid params: subscription %s was unsubscribed before it started", id)
	}
	subs.cancel[id] = cancel
	return SubscribeResult{Subscription: id}, nil
}
