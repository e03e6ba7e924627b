package pubsub

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/wait"
)

// sendCounter counts the messages a router sends to peers, and the
// messages peers asked it for by IWANT: a router answers each such request
// with the message, which is gossip repair, not publishing.
type sendCounter struct {
	*meshTracer
	sent   atomic.Int64
	wanted atomic.Int64
}

func (c *sendCounter) SendRPC(rpc *libp2ppubsub.RPC, _ peer.ID) {
	c.sent.Add(int64(len(rpc.GetPublish())))
}

func (c *sendCounter) RecvRPC(rpc *libp2ppubsub.RPC) {
	c.meshTracer.RecvRPC(rpc)
	for _, w := range rpc.GetControl().GetIwant() {
		c.wanted.Add(int64(len(w.GetMessageIDs())))
	}
}

// TestFloodOnlyWhileMeshForms: a publisher that does not subscribe sends
// its message to a GossipSub fanout, not to every topic peer, and the
// message still reaches every subscriber through their mesh.
// (TestPublisherSubscribedToFamily: one that subscribes floods while its
// mesh forms.)
func TestFloodOnlyWhileMeshForms(t *testing.T) {
	fanoutSize := libp2ppubsub.DefaultGossipSubParams().D
	subs := fanoutSize + 3
	counter := &sendCounter{meshTracer: newMeshTracer()}
	hp := newHost(t)
	pub := newBus(t, hp, WithRawTracer(counter))
	got := make(chan Message, 4*subs)
	var buses []*Topics
	for i := range subs {
		h := newHost(t)
		connect(t, hp, h)
		if i > 0 {
			connect(t, h, buses[i-1].h)
		}
		b := newBus(t, h)
		if _, err := b.Subscribe("fl:*", func(m Message) { got <- m }); err != nil {
			t.Fatal(err)
		}
		buses = append(buses, b)
	}
	for _, b := range buses {
		wait.For(t, 20*time.Second, func() error { return atLeast("mesh peers", b.MeshPeers("fl:"), 1) })
	}
	pub.mu.Lock()
	f, err := pub.join("fl")
	pub.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, func() error { return atLeast("publisher topic peers", len(pub.Peers("fl:")), subs) })

	counter.sent.Store(0)
	counter.wanted.Store(0)
	if _, err := pub.Publish(context.Background(), "fl:x", payload("one"), WithAtLeast(subs)); err != nil {
		t.Fatal(err)
	}
	for i := range subs {
		if m := recv(t, got, fmt.Sprintf("subscriber %d of %d", i+1, subs)); mark(m) != "one" {
			t.Fatalf("got %q", mark(m))
		}
	}
	// A subscriber that hears of the message by the publisher's gossip
	// before its mesh delivers it asks for it (IWANT), which a loaded
	// machine makes likely; those answers are not the publish. (A request
	// counted may not be answered yet, hence at most.)
	if n, w := counter.sent.Load(), counter.wanted.Load(); n < int64(fanoutSize) || n-w > int64(fanoutSize) {
		t.Errorf("the publisher sent its message %d times, %d of them asked for by IWANT; want a fanout of %d (not one per topic peer, %d)", n, w, fanoutSize, subs)
	}
	if pub.floodNeeded(f, subs) {
		t.Errorf("a publisher that does not subscribe floods")
	}
}

// A mesh peer whose connection has closed does not count toward a formed
// mesh: the router keeps it in the mesh until it has processed the
// close, and a message sent through it alone reaches the others a
// heartbeat later or more.
func TestFloodCountsOnlyConnectedMeshPeers(t *testing.T) {
	h, other := newHost(t), newHost(t)
	b := newBus(t, h)
	_ = collect(t, b, "fl:*")
	b.mu.Lock()
	f, err := b.join("fl")
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	topic := f.topic.String()
	gone := newHost(t).ID() // never connected
	b.mesh.Graft(gone, topic)
	if !b.floodNeeded(f, 1) {
		t.Errorf("a mesh of one peer that is not connected counts as formed: the message would not flood")
	}
	connect(t, h, other)
	b.mesh.Graft(other.ID(), topic)
	if b.floodNeeded(f, 1) {
		t.Errorf("a mesh holding the one connected topic peer does not count as formed")
	}
}
