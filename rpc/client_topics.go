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

// topicRouter hands mesh.message notifications to subscription handlers.
// It is used only on the client's read goroutine, which keeps each
// subscription's messages in order without a lock.
type topicRouter struct {
	handlers map[string]func(protocol.TopicMessage)
	// early holds messages for ids not (yet) known: the server may send a
	// subscription's first message before the response that names it.
	early map[string][]protocol.TopicMessage
	// gone holds the ids unsubscribed: a message the server queued just
	// before the subscription ended is dropped, not kept as early.
	gone map[string]struct{}
}

func (r *topicRouter) deliver(params json.RawMessage) {
	var p MessageParams
	if json.Unmarshal(params, &p) != nil || p.Subscription == "" {
		return
	}
	if h := r.handlers[p.Subscription]; h != nil {
		h(p.Message)
		return
	}
	if _, ok := r.gone[p.Subscription]; ok {
		return
	}
	if r.early == nil {
		r.early = map[string][]protocol.TopicMessage{}
	}
	if len(r.early[p.Subscription]) < maxEarlyMessages {
		r.early[p.Subscription] = append(r.early[p.Subscription], p.Message)
	}
}

// add registers a handler and hands it the messages that came first.
func (r *topicRouter) add(id string, h func(protocol.TopicMessage)) {
	if r.handlers == nil {
		r.handlers = map[string]func(protocol.TopicMessage){}
	}
	r.handlers[id] = h
	for _, m := range r.early[id] {
		h(m)
	}
	delete(r.early, id)
}

// remove forgets a handler once the server has ended its subscription.
func (r *topicRouter) remove(id string) {
	delete(r.handlers, id)
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
	return c.subscribe(ctx, SubscribeParams{Pattern: pattern}, handler)
}

// SubscribeDurable is Subscribe under the durable name name: the node
// first delivers, in order, what was published since the name's last
// subscription (fetched from history keepers), then the live messages,
// none twice. Those caught up may reach handler before SubscribeDurable
// returns.
func (c *Client) SubscribeDurable(ctx context.Context, pattern, name string, handler func(protocol.TopicMessage)) (string, error) {
	return c.subscribe(ctx, SubscribeParams{Pattern: pattern, Durable: name}, handler)
}

func (c *Client) subscribe(ctx context.Context, params SubscribeParams, handler func(protocol.TopicMessage)) (string, error) {
	if handler == nil {
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
