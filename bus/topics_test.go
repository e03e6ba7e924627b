package bus_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/protocol"
)

// recordingTopics is a mesh's topics that records what is published and
// subscribed, and reports one receiver for each publish.
type recordingTopics struct {
	mu        sync.Mutex
	published []string
	patterns  []string
}

func (r *recordingTopics) Publish(ctx context.Context, topic string, payload json.RawMessage, filter *protocol.Filter) (int, error) {
	return r.PublishID(ctx, "", topic, payload, filter)
}

func (r *recordingTopics) PublishID(_ context.Context, _, topic string, _ json.RawMessage, _ *protocol.Filter) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.published = append(r.published, topic)
	return 1, nil
}

func (r *recordingTopics) Subscribe(pattern string, h func(protocol.TopicMessage)) (func(), error) {
	return r.SubscribeOwn(pattern, h)
}

func (r *recordingTopics) SubscribeOwn(pattern string, _ func(protocol.TopicMessage)) (func(), error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.patterns = append(r.patterns, pattern)
	return func() {}, nil
}

func (r *recordingTopics) seen() (published, patterns []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.published...), append([]string(nil), r.patterns...)
}

// TestTopicsOnlyWhenGiven: the bus's topics reach the mesh through the
// topics it was built with (WithTopics) and through nothing else: without
// them a send with no local subscriber reaches nobody and no pattern is
// subscribed on the mesh, whatever the Mesh's type.
func TestTopicsOnlyWhenGiven(t *testing.T) {
	for _, tc := range []struct {
		name  string
		given bool
	}{
		{"without WithTopics", false},
		{"WithTopics", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			topics := &recordingTopics{}
			// The Mesh is the topics too: only the option may carry them.
			mesh := &struct {
				*fakemesh.Mesh
				*recordingTopics
			}{fakemesh.New(), topics}
			var opts []bus.Option
			if tc.given {
				opts = append(opts, bus.WithTopics(topics))
			}
			_, url := busServer(t, mesh, nil, opts...)
			sub := newPeer(t, url, "sub", nil)
			sub.subscribe(t, map[string]any{"topic": "local:*"})
			sender := newPeer(t, url, "sender", nil)
			res := sender.send(t, "news:1", "to the mesh")
			published, patterns := topics.seen()
			if !tc.given {
				if res.Success || len(res.Acks) != 0 || len(published) != 0 || len(patterns) != 0 {
					t.Errorf("without topics: result %+v, published %v, subscribed %v on the mesh; want nothing", res, published, patterns)
				}
				return
			}
			if !res.Success || len(res.Acks) != 1 || res.Acks[0].ClientID != "mesh" || !strings.Contains(res.Acks[0].Message, "published to 1 mesh peers") {
				t.Errorf("result %+v, want one ack from the mesh", res)
			}
			if len(published) != 1 || published[0] != "news:1" {
				t.Errorf("published %v on the mesh, want [news:1]", published)
			}
			if len(patterns) != 1 || patterns[0] != "local:*" {
				t.Errorf("subscribed %v on the mesh, want [local:*]", patterns)
			}
		})
	}
}

// TestWithTopicsNil: a nil IDPublisher is refused.
func TestWithTopicsNil(t *testing.T) {
	cfg := bus.DefaultConfig()
	if err := cfg.Apply(bus.WithTopics(nil)); err == nil || !strings.Contains(err.Error(), "nil IDPublisher") {
		t.Errorf("WithTopics(nil): %v, want refused", err)
	}
}
