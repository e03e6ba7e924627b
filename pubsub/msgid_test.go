package pubsub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	pb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/sign"
)

// TestMessageID: the id is the first MessageIDSize bytes of the
// signature, the same for the same message, and another for another.
func TestMessageID(t *testing.T) {
	s := newSigner(t)
	b1, sig1 := sealed(t, s, "news:a", "one")
	b2, sig2 := sealed(t, s, "news:a", "two")
	m1 := &pb.Message{Data: wire(sig1, b1)}
	id := MessageID(m1)
	if len(id) != MessageIDSize || MessageIDSize >= sign.SignatureSize {
		t.Fatalf("id of %d bytes, want %d (less than a signature)", len(id), MessageIDSize)
	}
	if id != string(sig1[:MessageIDSize]) {
		t.Fatalf("id %x is not the signature's first %d bytes %x", id, MessageIDSize, sig1[:MessageIDSize])
	}
	if again := MessageID(&pb.Message{Data: wire(sig1, b1)}); again != id {
		t.Fatalf("the same message has ids %x and %x", id, again)
	}
	if other := MessageID(&pb.Message{Data: wire(sig2, b2)}); other == id {
		t.Fatalf("two messages share the id %x", id)
	}
	if short := MessageID(&pb.Message{Data: []byte("short")}); short != "short" {
		t.Fatalf("id of a 5-byte message %q, want the whole of it", short)
	}
}

// iwantTracer records the message ids a router asks for with IWANT.
type iwantTracer struct {
	*meshTracer
	mu     sync.Mutex
	wanted map[string]bool
}

func (t *iwantTracer) SendRPC(rpc *libp2ppubsub.RPC, _ peer.ID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, iw := range rpc.GetControl().GetIwant() {
		for _, id := range iw.GetMessageIDs() {
			t.wanted[id] = true
		}
	}
}

// pruned records the peers that pruned this router from their mesh
// (the tracer's Prune).
type prunedTracer struct {
	*meshTracer
	by sync.Map
}

func (t *prunedTracer) Prune(p peer.ID, _ string) { t.by.Store(p, true) }

func (t *iwantTracer) asked(id string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.wanted[id]
}

// TestGossipRepair: a subscriber that is no mesh peer of anyone gets a
// message through gossip: its peer advertises the id in IHAVE, and it
// asks for it with IWANT. The subscriber is a plain GossipSub router
// with the mesh's id function and a mesh degree of 0, which prunes every
// graft, linked only to b, which has the message from a (a publishes
// without subscribing: to b, as its fanout).
func TestGossipRepair(t *testing.T) {
	ha, hb, hc := newHost(t), newHost(t), newHost(t)
	pruned := &prunedTracer{meshTracer: newMeshTracer()}
	a, b := newBus(t, ha), newBus(t, hb, WithRawTracer(pruned))
	if _, err := b.Subscribe("news:*", func(Message) {}); err != nil {
		t.Fatal(err)
	}
	tr := &iwantTracer{meshTracer: newMeshTracer(), wanted: map[string]bool{}}
	params := libp2ppubsub.DefaultGossipSubParams()
	params.D, params.Dlo, params.Dhi, params.Dout, params.Dscore = 0, 0, 0, 0, 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	raw, err := libp2ppubsub.NewGossipSub(ctx, hc,
		libp2ppubsub.WithMessageSignaturePolicy(libp2ppubsub.StrictNoSign),
		libp2ppubsub.WithMessageIdFn(MessageID),
		libp2ppubsub.WithGossipSubParams(params),
		libp2ppubsub.WithRawTracer(tr))
	if err != nil {
		t.Fatal(err)
	}
	topic, err := raw.Join(GossipTopic("news:"))
	if err != nil {
		t.Fatal(err)
	}
	defer topic.Close()
	sub, err := topic.Subscribe()
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel()
	connect(t, ha, hb)
	// b dials c: a router with a full mesh accepts a graft only from a
	// peer it dialed.
	connect(t, hb, hc)
	wait.For(t, 20*time.Second, func() error {
		if _, ok := pruned.by.Load(hc.ID()); !ok {
			return errors.New("c has not pruned b's graft yet")
		}
		if mesh := b.MeshPeers("news:"); mesh != 0 {
			return fmt.Errorf("b has %d mesh peers, want none", mesh)
		}
		return nil
	})

	n, err := a.Publish(ctx, "news:now", payload("by gossip"))
	if err != nil || n != 1 {
		t.Fatalf("publish reached %d: %v", n, err)
	}
	got, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(got.GetData(), []byte("by gossip")) {
		t.Fatalf("c got %q", got.GetData())
	}
	if id := MessageID(got.Message); !tr.asked(id) {
		t.Fatalf("c got the message without asking for its id %x (mesh peers of b: %d)", id, b.MeshPeers("news:"))
	}
}
