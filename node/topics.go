package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/pubsub"
)

// startTopics starts the topic router and presence. The router finds topic
// peers through the capability directory when the DHT is on.
func (n *Node) startTopics() error {
	// Presence is best effort and every agent is in it: its mesh peers
	// are not protected from the connection manager as those of the
	// topics agents publish on are (see pubsub.WithUnprotectedFamilies).
	opts := []pubsub.Option{pubsub.WithSelf(n.topicSelf()), pubsub.WithUnprotectedFamilies(protocol.PresenceFamily)}
	if n.dir != nil {
		opts = append(opts, pubsub.WithDiscovery(n.dir.TopicDiscovery()))
	}
	if st := n.cfg.Store; st != nil {
		opts = append(opts, pubsub.WithPositions(storePositions{st}))
		if len(n.cfg.KeepHistory) > 0 {
			opts = append(opts, pubsub.WithArchive(storeArchive{st}, n.cfg.KeepHistory...))
		}
	}
	if n.cfg.Metrics != nil {
		opts = append(opts, pubsub.WithMetrics(n.cfg.Metrics.Registry))
	}
	opts = append(opts, n.cfg.PubSubOptions...)
	bus, err := pubsub.New(n.host, n.signer, opts...)
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	n.topics = bus
	return n.startPresence()
}

// topicSelf describes this agent to broadcast filters.
func (n *Node) topicSelf() pubsub.Self {
	return pubsub.Self{AgentID: n.idStr, PersonaType: n.cfg.Presence.PersonaType, Capabilities: n.capabilityNames()}
}

// Publish sends payload (a JSON object, as every envelope payload is) to every agent subscribed to a
// pattern matching topic, anywhere in the mesh, this node's own
// subscriptions included, and returns how many receivers it went to: topic
// peers plus matching subscriptions of this node (each gets it once).
// filter (nil: everyone) is a seed 004 broadcast filter
// applied by receivers. When nobody subscribes to the topic's family,
// Publish looks subscribers up in the directory and waits for one until
// ctx's deadline (without one, the publish wait: pubsub.WithPublishWait,
// default 5 s), then
// fails with an error wrapping protocol.ErrNoPeers: a publish is never
// silently lost. The presence family is reserved to the node.
func (n *Node) Publish(ctx context.Context, topic string, payload json.RawMessage, filter *protocol.Filter) (int, error) {
	return n.publish(ctx, "", topic, payload, filter)
}

// PublishID is Publish under envelope id id (protocol.NewID makes one)
// rather than a fresh one, so that a caller that also subscribes
// recognises its own message when its subscription receives it: the
// relay's bus, which delivers its clients' messages to its own
// subscribers itself, uses it.
func (n *Node) PublishID(ctx context.Context, id, topic string, payload json.RawMessage, filter *protocol.Filter) (int, error) {
	if id == "" {
		return 0, protocol.Errorf(protocol.CodeInvalidMessage, "PublishID: empty id")
	}
	return n.publish(ctx, id, topic, payload, filter)
}

func (n *Node) publish(ctx context.Context, id, topic string, payload json.RawMessage, filter *protocol.Filter) (int, error) {
	if n.topics == nil {
		return 0, ErrNoTopics
	}
	if pubsub.Family(topic) == protocol.PresenceFamily {
		return 0, protocol.Errorf(protocol.CodeInvalidMessage, "topic %q: the %s family is reserved for heartbeats", topic, protocol.PresenceFamily)
	}
	if len(payload) == 0 || payload[0] != '{' || !json.Valid(payload) {
		return 0, protocol.Errorf(protocol.CodeInvalidMessage, "payload must be a JSON object")
	}
	var opts []pubsub.PublishOption
	if deadline, ok := ctx.Deadline(); ok {
		opts = append(opts, pubsub.WithWait(max(time.Until(deadline), 0)))
	}
	if filter != nil {
		opts = append(opts, pubsub.WithFilter(*filter))
	}
	if id != "" {
		opts = append(opts, pubsub.WithID(id))
	}
	peers, err := n.topics.Publish(ctx, topic, payload, opts...)
	if errors.Is(err, pubsub.ErrPattern) {
		return 0, protocol.Errorf(protocol.CodeInvalidMessage, "%v", err)
	}
	return peers, err
}

// Subscribe calls handler, in order and on a goroutine of its own, for each
// message whose topic matches pattern, from any agent in the mesh
// (including this one): exactly, fnmatch-style ("outbound:*"), or as a
// prefix when the pattern has no wildcard and ends in ':', '-', '.', '/'
// or '_'. The family, the part before the first ':' or '.', must be literal. The returned
// function cancels the subscription.
func (n *Node) Subscribe(pattern string, handler func(protocol.TopicMessage)) (cancel func(), err error) {
	if n.topics == nil {
		return nil, ErrNoTopics
	}
	if handler == nil {
		return nil, errors.New("node: Subscribe: nil handler")
	}
	s, err := n.topics.Subscribe(pattern, func(m pubsub.Message) { handler(topicMessage(m)) })
	if errors.Is(err, pubsub.ErrPattern) {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "%v", err)
	}
	if err != nil {
		return nil, err
	}
	return s.Cancel, nil
}

// SubscribeOwn is Subscribe for the caller of PublishID, which recognises
// the messages it published by their id and drops them: PublishID does not
// count such a subscription as a receiver, so a message that reached only
// it is not reported as delivered.
func (n *Node) SubscribeOwn(pattern string, handler func(protocol.TopicMessage)) (cancel func(), err error) {
	if n.topics == nil {
		return nil, ErrNoTopics
	}
	if handler == nil {
		return nil, errors.New("node: SubscribeOwn: nil handler")
	}
	s, err := n.topics.SubscribeOwn(pattern, func(m pubsub.Message) { handler(topicMessage(m)) })
	if errors.Is(err, pubsub.ErrPattern) {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "%v", err)
	}
	if err != nil {
		return nil, err
	}
	return s.Cancel, nil
}

func topicMessage(m pubsub.Message) protocol.TopicMessage {
	tm := protocol.TopicMessage{Topic: m.Topic, From: m.From.String(), Payload: m.Payload, ID: m.Envelope.ID}
	if ts, err := m.Envelope.Time(); err == nil {
		tm.Time = ts
	}
	return tm
}
