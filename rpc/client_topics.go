package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// maxEarlyMessages bounds the messages kept for a subscription whose id
// the client has not learnt yet (its first messages can overtake the
// mesh.subscribe response). A durable subscription's whole catch-up comes
// before its response, so the bound is a fetch's (pubsub.MaxFetch).
const maxEarlyMessages = 100_000

// orphanUnsubscribeTimeout bounds the mesh.unsubscribe a client sends for
// a subscription whose Subscribe gave up before the server answered.
const orphanUnsubscribeTimeout = 10 * time.Second

// topicRouter hands mesh.message notifications and requests to
// subscription handlers. It is used only on the client's read goroutine,
// which keeps each subscription's messages in order without a lock.
type topicRouter struct {
	handlers map[string]topicHandler
	// early holds messages for ids not (yet) known: the server may send a
	// subscription's first message before the response that names it.
	early map[string][]earlyMessage
	// gone holds the ids unsubscribed: a message the server queued just
	// before the subscription ended is dropped, not kept as early.
	gone map[string]struct{}
	// answer sends the response to a durable subscription's message.
	answer func(id json.RawMessage, err error)
}

// topicHandler is a subscription's handler: plain for notifications,
// acked for a durable subscription's requests.
type topicHandler struct {
	plain func(protocol.TopicMessage)
	acked func(protocol.TopicMessage) error
}

// earlyMessage is a message kept for a subscription not yet known, with
// its request id when it must be answered.
type earlyMessage struct {
	msg   protocol.TopicMessage
	reqID json.RawMessage
}

// errNotSubscribed answers a durable message whose subscription this
// client no longer has: the node keeps it for the next subscription.
var errNotSubscribed = Errorf(CodeInvalidParams, "no such subscription on this client")

// deliver takes the params of mesh.message; reqID is nil for a
// notification, and the request's id for a durable subscription's
// message, which is answered once its handler returns.
func (r *topicRouter) deliver(params json.RawMessage, reqID json.RawMessage) {
	var p MessageParams
	if json.Unmarshal(params, &p) != nil || p.Subscription == "" {
		if reqID != nil {
			r.answer(reqID, Errorf(CodeInvalidParams, "invalid params: mesh.message needs a subscription and a message"))
		}
		return
	}
	if h, ok := r.handlers[p.Subscription]; ok {
		r.call(h, earlyMessage{p.Message, reqID})
		return
	}
	_, gone := r.gone[p.Subscription]
	if !gone && len(r.early[p.Subscription]) < maxEarlyMessages {
		if r.early == nil {
			r.early = map[string][]earlyMessage{}
		}
		r.early[p.Subscription] = append(r.early[p.Subscription], earlyMessage{p.Message, reqID})
		return
	}
	if reqID != nil {
		r.answer(reqID, errNotSubscribed)
	}
}

// call runs h on m and answers m if it is a request.
func (r *topicRouter) call(h topicHandler, m earlyMessage) {
	var err error
	switch {
	case h.acked != nil:
		err = h.acked(m.msg)
	case h.plain != nil:
		h.plain(m.msg)
	}
	if m.reqID != nil {
		r.answer(m.reqID, err)
	}
}

// add registers a handler and hands it the messages that came first.
func (r *topicRouter) add(id string, h topicHandler) {
	if r.handlers == nil {
		r.handlers = map[string]topicHandler{}
	}
	r.handlers[id] = h
	for _, m := range r.early[id] {
		r.call(h, m)
	}
	delete(r.early, id)
}

// remove forgets a handler once the server has ended its subscription;
// the requests kept for it are answered as not processed.
func (r *topicRouter) remove(id string) {
	delete(r.handlers, id)
	for _, m := range r.early[id] {
		if m.reqID != nil {
			r.answer(m.reqID, errNotSubscribed)
		}
	}
	delete(r.early, id)
	if r.gone == nil {
		r.gone = map[string]struct{}{}
	}
	r.gone[id] = struct{}{}
}

// Publish runs mesh.publish: payload (a JSON object) to every agent
// subscribed to topic, with an optional seed 004 filter, waiting up to
// timeout (0: DefaultPublishTimeout) for a subscriber. It returns how many
// topic peers the message went to. When no agent subscribes the error
// satisfies errors.Is(err, protocol.ErrNoPeers); an AgentProtocol failure
// (a bad topic, for example) is a *protocol.Error.
func (c *Client) Publish(ctx context.Context, topic string, payload json.RawMessage, filter *protocol.Filter, timeout time.Duration) (int, error) {
	params := PublishParams{Topic: topic, Payload: payload, Filter: filter}
	if timeout > 0 {
		params.TimeoutMS = int64((timeout + time.Millisecond - 1) / time.Millisecond)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout+timeoutGrace)
		defer cancel()
	}
	var out PublishResult
	err := c.Call(ctx, MethodMeshPublish, params, &out)
	var re *Error
	switch {
	case err == nil:
		return out.Peers, nil
	case errors.As(err, &re) && re.Code == CodeNoPeers:
		return 0, fmt.Errorf("%s: %w", re.Message, protocol.ErrNoPeers)
	}
	if pe := ProtocolError(err); pe != nil {
		return 0, pe
	}
	return 0, err
}

// Subscribe runs mesh.subscribe and returns the subscription id. handler
// receives each matching message in order, on the client's read
// goroutine: it must not block for long (a client that stops reading is
// disconnected by the server). Messages that arrive before Subscribe
// returns are delivered too, none lost. If ctx ends before the server
// answers, Subscribe returns ctx's error and the subscription, should
// the server make it, is cancelled when its answer arrives.
func (c *Client) Subscribe(ctx context.Context, pattern string, handler func(protocol.TopicMessage)) (string, error) {
	if handler == nil {
		return "", errors.New("rpc: Subscribe: nil handler")
	}
	return c.subscribe(ctx, SubscribeParams{Pattern: pattern}, topicHandler{plain: handler})
}

// SubscribeDurable is Subscribe under the durable name name: the node
// first delivers, in order, what was published since the name's last
// subscription (fetched from history keepers), then the live messages.
// Each message is a mesh.message request the client answers when
// handler returns: nil tells the node the message was processed, and
// its position moves past it; an error (sent as the error answer, a
// *protocol.Error keeping its code) tells it the message was not, and
// the node delivers nothing more on this subscription until it is
// unsubscribed and subscribed again, which starts with that message.
// The node sends the next message only after the answer. Delivery is at
// least once: a message comes again, under the same id (message.ID and
// From), when its answer did not reach the node (this process or the
// connection ended first) or the node stopped before saving its
// position; handler can skip a repeat by that id. handler runs on the
// client's read goroutine, as for Subscribe.
func (c *Client) SubscribeDurable(ctx context.Context, pattern, name string, handler func(protocol.TopicMessage) error) (string, error) {
	if handler == nil {
		return "", errors.New("rpc: SubscribeDurable: nil handler")
	}
	return c.subscribe(ctx, SubscribeParams{Pattern: pattern, Durable: name}, topicHandler{acked: handler})
}

func (c *Client) subscribe(ctx context.Context, params SubscribeParams, handler topicHandler) (string, error) {
	if handler.plain == nil && handler.acked == nil {
		return "", errors.New("rpc: Subscribe: nil handler")
	}
	var out SubscribeResult
	hooks := callHooks{response: func(m *message) {
		if id := subscriptionOf(m); id != "" {
			c.topics.add(id, handler)
		}
	}, orphan: func(m *message) {
		// ctx ended before the server answered: undo the subscription
		// rather than leave it running with nobody to read it.
		if id := subscriptionOf(m); id != "" {
			c.topics.remove(id)
			c.wg.Go(func() {
				ctx, cancel := context.WithTimeout(c.ctx, orphanUnsubscribeTimeout)
				defer cancel()
				_ = c.Call(ctx, MethodMeshUnsubscribe, UnsubscribeParams{Subscription: id}, nil)
			})
		}
	}}
	if err := c.call(ctx, MethodMeshSubscribe, params, &out, hooks); err != nil {
		if pe := ProtocolError(err); pe != nil {
			return "", pe
		}
		return "", err
	}
	return out.Subscription, nil
}

// subscriptionOf returns the id in a successful mesh.subscribe response,
// or "".
func subscriptionOf(m *message) string {
	var r SubscribeResult
	if m.Error != nil || json.Unmarshal(m.Result, &r) != nil {
		return ""
	}
	return r.Subscription
}

// Unsubscribe runs mesh.unsubscribe. Once it returns nil the handler is
// not called again (a message the server queued just before is dropped);
// a message being handled when it is called may still finish.
func (c *Client) Unsubscribe(ctx context.Context, id string) error {
	hooks := callHooks{response: func(m *message) {
		if m.Error == nil {
			c.topics.remove(id)
		}
	}}
	return c.call(ctx, MethodMeshUnsubscribe, UnsubscribeParams{Subscription: id}, nil, hooks)
}
