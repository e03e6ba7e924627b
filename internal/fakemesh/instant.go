package fakemesh

import (
	"context"
	"encoding/json"

	"github.com/meshagent/meshagent/protocol"
)

// Instant is the mesh of the whole-path fuzz targets, where only the
// listener's decoding and dispatch are under test: it answers every call
// at once, successfully, and offers every optional part a listener looks
// for (publishing, subscribing, discovery), so that
// every method reaches its params decoding. It knows only itself, SelfID.
type Instant struct{}

// AgentID returns SelfID.
func (Instant) AgentID() string { return SelfID }

// Call answers {"ok":true} unless ctx has ended.
func (Instant) Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &protocol.Response{CorrelationID: req.CorrelationID, Status: protocol.StatusSuccess, Result: json.RawMessage(`{"ok":true}`)}, nil
}

// Peers returns the mesh's own agent only.
func (Instant) Peers() []protocol.PeerInfo {
	return []protocol.PeerInfo{{AgentID: SelfID, Name: "self", Connected: true}}
}

// Publish reports one receiver.
func (Instant) Publish(context.Context, string, json.RawMessage, *protocol.Filter) (int, error) {
	return 1, nil
}

// PublishID reports one receiver.
func (Instant) PublishID(context.Context, string, string, json.RawMessage, *protocol.Filter) (int, error) {
	return 1, nil
}

// Subscribe accepts every pattern and never delivers.
func (Instant) Subscribe(string, func(protocol.TopicMessage)) (func(), error) { return func() {}, nil }

// SubscribeOwn accepts every pattern and never delivers.
func (Instant) SubscribeOwn(string, func(protocol.TopicMessage)) (func(), error) {
	return func() {}, nil
}

// Discover finds nothing.
func (Instant) Discover(context.Context, string, bool) (<-chan protocol.PeerInfo, error) {
	ch := make(chan protocol.PeerInfo)
	close(ch)
	return ch, nil
}
