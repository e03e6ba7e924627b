package pubsub

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

// TestPublisherSubscribedToFamily: a publisher that itself subscribes to
// another topic of the family still reaches the family's other
// subscribers, whether the GossipSub mesh has formed or not.
func TestPublisherSubscribedToFamily(t *testing.T) {
	ha, hb, hc := newHost(t), newHost(t), newHost(t)
	a, b, c := newBus(t, ha), newBus(t, hb), newBus(t, hc)
	connect(t, ha, hb)
	connect(t, hb, hc)
	connect(t, ha, hc)
	all := collect(t, a, "pr.*")
	opened := collect(t, c, "pr.opened")
	approved := collect(t, b, "pr.approved")
	wait.For(t, 10*time.Second, func() error {
		if n := len(b.Peers("pr.opened")); n < 2 {
			return fmt.Errorf("b has %d peers in the family, want 2", n)
		}
		return nil
	})
	n, err := b.Publish(context.Background(), "pr.opened", payload("opened"))
	if err != nil || n < 2 {
		t.Fatalf("Publish = %d, %v", n, err)
	}
	if m := recv(t, opened, "pr.opened on c"); mark(m) != "opened" {
		t.Errorf("c got %q", mark(m))
	}
	if m := recv(t, all, "pr.* on a"); mark(m) != "opened" {
		t.Errorf("a got %q", mark(m))
	}
	n, err = c.Publish(context.Background(), "pr.approved", payload("approved"))
	if err != nil || n < 2 {
		t.Fatalf("Publish = %d, %v", n, err)
	}
	if m := recv(t, approved, "pr.approved on b"); mark(m) != "approved" {
		t.Errorf("b got %q", mark(m))
	}
	if m := recv(t, all, "pr.* on a"); mark(m) != "approved" {
		t.Errorf("a got %q", mark(m))
	}
	select {
	case m := <-approved:
		t.Errorf("pr.approved subscriber also got %q", mark(m))
	default:
	}
}

// TestPublishAfterDisconnect: a peer whose connection has just closed is
// not counted as a topic peer, though the router still lists it for a
// moment; a message "published" to it would be lost.
func TestPublishAfterDisconnect(t *testing.T) {
	ha, hb := newHost(t), newHost(t)
	a, b := newBus(t, ha), newBus(t, hb)
	connect(t, ha, hb)
	in := collect(t, b, "alerts:*")
	if _, err := a.Publish(context.Background(), "alerts:x", payload("first"), WithWait(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, in, "first on b"); mark(m) != "first" {
		t.Fatalf("b got %q", mark(m))
	}
	if err := ha.Network().ClosePeer(hb.ID()); err != nil {
		t.Fatal(err)
	}
	n, err := a.Publish(context.Background(), "alerts:x", payload("lost?"), WithWait(50*time.Millisecond))
	if !errors.Is(err, ErrNoPeers) || n != 0 {
		t.Fatalf("Publish right after the disconnect = %d, %v; want 0, ErrNoPeers", n, err)
	}
}
