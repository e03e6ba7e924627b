package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/pubsub"
	"github.com/meshagent/meshagent/store"
)

// SubscribeDurable is Subscribe under a durable name: the node remembers
// in its store (WithStore) which messages the handler took, and a later
// SubscribeDurable of the name first delivers, in order (envelope time,
// then id), what was published since, fetched from history keepers
// (relays, and nodes started WithKeepHistory) and verified end to end,
// then the live messages. handler is called one message at a time, in
// order, on the subscription's goroutine; a message counts as taken only
// when it returns nil. An error stops the subscription (nothing more is
// delivered) and the next SubscribeDurable of the name delivers that
// message again first. Delivery is at least once: a message is delivered
// again only when its handler did not return nil or the node stopped
// before saving the position after it. The first fetch of a resume runs
// before SubscribeDurable returns, within ctx; a resume that finds no
// keeper fails with an error wrapping protocol.ErrNoPeers and keeps the
// position for a later try. A name follows one pattern, and may be in
// use once on a node at a time (otherwise INVALID_MESSAGE); a new name
// when the node keeps positions for as many names as it may is refused
// with INVALID_MESSAGE too (ForgetDurable makes room). The returned
// function cancels the subscription (ending the ctx handler gets) and
// saves its position.
func (n *Node) SubscribeDurable(ctx context.Context, pattern, name string, handler func(context.Context, protocol.TopicMessage) error) (cancel func(), err error) {
	if n.topics == nil {
		return nil, ErrNoTopics
	}
	if handler == nil {
		return nil, errors.New("node: SubscribeDurable: nil handler")
	}
	d, err := n.topics.SubscribeDurable(ctx, pattern, name, func(ctx context.Context, m pubsub.Message) error {
		return handler(ctx, topicMessage(m))
	})
	switch {
	case errors.Is(err, pubsub.ErrPattern), errors.Is(err, pubsub.ErrDurable):
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "%v", err)
	case errors.Is(err, pubsub.ErrNoKeepers):
		return nil, errors.Join(protocol.ErrNoPeers, err)
	case err != nil:
		return nil, err
	}
	return d.Cancel, nil
}

// ForgetDurable deletes the position the node keeps for the durable
// subscription name, and reports whether it kept one: the node keeps
// positions for at most store.DefaultMaxDurables names (the store's
// WithMaxDurables), past which SubscribeDurable of a new name is refused
// with INVALID_MESSAGE. A name in use on this node is refused the same
// way: cancel its subscription first.
func (n *Node) ForgetDurable(ctx context.Context, name string) (bool, error) {
	if n.topics == nil {
		return false, ErrNoTopics
	}
	ok, err := n.topics.ForgetDurable(ctx, name)
	if errors.Is(err, pubsub.ErrDurable) {
		return false, protocol.Errorf(protocol.CodeInvalidMessage, "%v", err)
	}
	return ok, err
}

// Durables lists the durable subscription names the node keeps positions
// for, sorted, each with its position's size and whether a subscription
// of it runs on the node now, and the most it keeps (the store's
// WithMaxDurables): what an operator reads when a new name is refused. A
// node without a store keeps none and refuses with INVALID_MESSAGE, as
// ForgetDurable does.
func (n *Node) Durables(ctx context.Context) (protocol.DurableList, error) {
	if n.topics == nil {
		return protocol.DurableList{}, ErrNoTopics
	}
	ds, err := n.topics.Durables(ctx)
	if errors.Is(err, pubsub.ErrDurable) {
		return protocol.DurableList{}, protocol.Errorf(protocol.CodeInvalidMessage, "%v", err)
	}
	if err != nil {
		return protocol.DurableList{}, err
	}
	out := protocol.DurableList{Durables: ds}
	// Positions given with PubSubOptions instead of a store have no
	// bound the node knows: Limit stays 0.
	if n.cfg.Store != nil {
		out.Limit = n.cfg.Store.MaxDurables()
	}
	return out, nil
}

// storeArchive keeps a history keeper's messages in the node's store,
// one stream per topic family.
type storeArchive struct{ st *store.Store }

func (a storeArchive) Keep(ctx context.Context, m pubsub.KeptMessage) error {
	_, err := a.st.Keep(ctx, store.KeptMessage{Stream: m.Family, Topic: m.Topic, Key: m.Key, Time: m.Time, Data: m.Data})
	return err
}

func (a storeArchive) Page(ctx context.Context, q pubsub.ArchiveQuery) (pubsub.ArchivePage, error) {
	p, err := a.st.Kept(ctx, store.KeptQuery{Stream: q.Family, Since: q.Since, Until: q.Until, After: q.After, Limit: q.Limit, MaxBytes: q.MaxBytes, Match: q.Match})
	if err != nil {
		return pubsub.ArchivePage{}, err
	}
	out := pubsub.ArchivePage{Next: p.Next, Messages: make([]pubsub.KeptMessage, len(p.Messages))}
	for i, m := range p.Messages {
		out.Messages[i] = pubsub.KeptMessage{Family: m.Stream, Topic: m.Topic, Key: m.Key, Time: m.Time, Data: m.Data}
	}
	return out, nil
}

// storePositions keeps durable subscriptions' positions in the store.
type storePositions struct{ st *store.Store }

func (p storePositions) SavePosition(ctx context.Context, name string, v []byte) error {
	err := p.st.SaveDurable(ctx, name, v)
	if errors.Is(err, store.ErrFull) {
		return fmt.Errorf("%w (%v)", pubsub.ErrTooManyDurables, err)
	}
	return err
}

func (p storePositions) ForgetPosition(ctx context.Context, name string) (bool, error) {
	err := p.st.DeleteDurable(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

func (p storePositions) ListPositions(ctx context.Context) ([]pubsub.SavedPosition, error) {
	ds, err := p.st.Durables(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]pubsub.SavedPosition, len(ds))
	for i, d := range ds {
		out[i] = pubsub.SavedPosition{Name: d.Name, Bytes: d.Bytes}
	}
	return out, nil
}

func (p storePositions) Position(ctx context.Context, name string) ([]byte, error) {
	v, err := p.st.Durable(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return v, err
}
