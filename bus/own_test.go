package bus_test

import (
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// heldMesh is a real node whose topic subscriptions end only once release
// is closed: it holds open the moment, which a subscriber's disconnection
// otherwise makes for a few microseconds, when a bus subscription has left
// the bus's table but its mesh subscription is still there.
type heldMesh struct {
	*node.Node
	once             sync.Once
	entered, release chan struct{}
}

func (m *heldMesh) held(cancel func()) func() {
	return func() {
		m.once.Do(func() { close(m.entered) })
		<-m.release
		cancel()
	}
}

func (m *heldMesh) Subscribe(pattern string, h func(protocol.TopicMessage)) (func(), error) {
	cancel, err := m.Node.Subscribe(pattern, h)
	if err != nil {
		return nil, err
	}
	return m.held(cancel), nil
}

func (m *heldMesh) SubscribeOwn(pattern string, h func(protocol.TopicMessage)) (func(), error) {
	cancel, err := m.Node.SubscribeOwn(pattern, h)
	if err != nil {
		return nil, err
	}
	return m.held(cancel), nil
}

// TestOwnMeshSubscriptionIsNoDelivery: a message that reached only the
// bus's own mesh subscription (which drops its own copy) is not
// acknowledged as "published to 1 mesh peers": it takes seed 001's
// no-subscriber path, success false and a dead letter. A subscription of
// the node's that is not the bus's still counts.
func TestOwnMeshSubscriptionIsNoDelivery(t *testing.T) {
	n := meshtest.Node(t, 70)
	mesh := &heldMesh{Node: n, entered: make(chan struct{}), release: make(chan struct{})}
	st := openStore(t, filepath.Join(t.TempDir(), "bus.db"))
	_, url := busServer(t, mesh, st, bus.WithTopics(mesh), bus.WithMeshWait(300*time.Millisecond))

	sub := newPeer(t, url, "sub", nil)
	sub.subscribe(t, map[string]any{"topic": "dur:*"})
	sender := newPeer(t, url, "sender", nil)
	if res := sender.send(t, "dur:1", "one"); !res.Success {
		t.Fatalf("dur:1 with a subscriber: %+v", res)
	}

	unsubscribed := make(chan error, 1)
	go func() { unsubscribed <- sub.Call(ctxT(t), "unsubscribe", map[string]any{"topic": "dur:*"}, nil) }()
	receive(t, mesh.entered, "the mesh subscription's end")
	res := sender.send(t, "dur:7", "lost?")
	close(mesh.release)
	if err := receive(t, unsubscribed, "unsubscribe"); err != nil {
		t.Fatal(err)
	}
	if res.Success || len(res.Acks) != 0 {
		t.Errorf("dur:7 reached nobody but was answered %+v", res)
	}
	dl, err := st.DeadLetters(ctxT(t), store.DLQFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(dl) != 1 || dl[0].Topic != "dur:7" {
		t.Errorf("dead letters %+v, want dur:7's", dl)
	}

	// A subscriber of the node's own that is not the bus's is a receiver.
	got := make(chan protocol.TopicMessage, 1)
	cancel, err := n.Subscribe("dur:*", func(m protocol.TopicMessage) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	res = sender.send(t, "dur:8", "to the node")
	if !res.Success || len(res.Acks) != 1 || !strings.Contains(res.Acks[0].Message, "published to 1 mesh peers") {
		t.Errorf("dur:8 with a node subscriber: %+v", res)
	}
	if m := receive(t, got, "dur:8 at the node's subscriber"); m.Topic != "dur:8" {
		t.Errorf("the node's subscriber got %+v", m)
	}
}
