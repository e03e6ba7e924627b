package pubsub

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

// A node's own subscriptions are receivers of its own publishes: a
// message with only local subscribers is delivered to them, once each,
// and counted, instead of failing with ErrNoPeers.

func TestPublishToLocalSubscribers(t *testing.T) {
	b := newBus(t, newHost(t), WithPublishWait(5*time.Second))
	wild := collect(t, b, "outbound:*")
	exact := collect(t, b, "outbound:2")
	other := collect(t, b, "outbound:3")
	start := time.Now()
	n, err := b.Publish(context.Background(), "outbound:2", payload("mine"), WithID("own-id-1"))
	if err != nil || n != 2 {
		t.Fatalf("Publish = %d, %v; want the 2 matching local subscriptions", n, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Publish with local subscribers waited %s for topic peers", d)
	}
	for name, ch := range map[string]<-chan Message{"outbound:*": wild, "outbound:2": exact} {
		m := recv(t, ch, name)
		if mark(m) != "mine" || m.Envelope.ID != "own-id-1" || m.From != b.signer.ID() {
			t.Errorf("%s got %q id %q from %s", name, mark(m), m.Envelope.ID, m.From)
		}
	}
	// A second publish is the first each subscription sees after the
	// first: no copy of the first came twice.
	if _, err := b.Publish(context.Background(), "outbound:2", payload("second")); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan Message{"outbound:*": wild, "outbound:2": exact} {
		if m := recv(t, ch, name); mark(m) != "second" {
			t.Errorf("%s got %q, want second (a duplicate of the first?)", name, mark(m))
		}
	}
	select {
	case m := <-other:
		t.Errorf("outbound:3 got %q", mark(m))
	default:
	}
}

func TestPublishLocalFiltered(t *testing.T) {
	b := newBus(t, newHost(t), WithPublishWait(200*time.Millisecond))
	collect(t, b, "team:*")
	n, err := b.Publish(context.Background(), "team:x", payload("not for me"), WithFilter(Filter{ExcludeAgents: []string{b.signer.ID().String()}}))
	if !errors.Is(err, ErrNoPeers) || n != 0 {
		t.Errorf("Publish excluding the only subscriber = %d, %v; want 0, ErrNoPeers", n, err)
	}
	if _, err := b.Publish(context.Background(), "team:x", payload("x"), WithID(string(make([]byte, 200)))); err == nil {
		t.Error("an oversize id was accepted")
	}
}

// TestPublishLocalAndRemote: a publisher subscribed itself counts itself
// and its topic peer, and both get the message once.
func TestPublishLocalAndRemote(t *testing.T) {
	ha, hb := newHost(t), newHost(t)
	a, b := newBus(t, ha), newBus(t, hb)
	connect(t, ha, hb)
	mine, theirs := collect(t, a, "alerts:*"), collect(t, b, "alerts:*")
	wait.For(t, 10*time.Second, func() error {
		if n := len(a.Peers("alerts:x")); n != 1 {
			return fmt.Errorf("a has %d peers in the family, want b", n)
		}
		return nil
	})
	n, err := a.Publish(context.Background(), "alerts:x", payload("both"))
	if err != nil || n != 2 {
		t.Fatalf("Publish = %d, %v; want 2 (b and a's own subscription)", n, err)
	}
	for name, ch := range map[string]<-chan Message{"a": mine, "b": theirs} {
		if m := recv(t, ch, name); mark(m) != "both" {
			t.Errorf("%s got %q", name, mark(m))
		}
	}
	if _, err := a.Publish(context.Background(), "alerts:x", payload("next")); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]<-chan Message{"a": mine, "b": theirs} {
		if m := recv(t, ch, name); mark(m) != "next" {
			t.Errorf("%s got %q after the first, want next", name, mark(m))
		}
	}
}

// TestOwnSubscriptionNotCounted: a SubscribeOwn subscription is no
// receiver of a Publish WithID (its publisher drops its own copy): alone
// it makes the publish fail with ErrNoPeers at once, without waiting for
// topic peers. A Publish without an id counts it, and any other local
// subscription is counted either way.
func TestOwnSubscriptionNotCounted(t *testing.T) {
	b := newBus(t, newHost(t), WithPublishWait(time.Minute))
	if _, err := b.SubscribeOwn("dur:*", func(Message) {}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	n, err := b.Publish(context.Background(), "dur:7", payload("own"), WithID("own-1"))
	if !errors.Is(err, ErrNoPeers) || n != 0 {
		t.Errorf("Publish WithID to the own subscription only = %d, %v; want 0, ErrNoPeers", n, err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Publish waited %s for topic peers with the publisher's own subscription there", d)
	}
	if n, err := b.Publish(context.Background(), "dur:7", payload("not own")); err != nil || n != 1 {
		t.Errorf("Publish without an id = %d, %v; want the subscription counted", n, err)
	}
	collect(t, b, "dur:7")
	if n, err := b.Publish(context.Background(), "dur:7", payload("other"), WithID("own-2")); err != nil || n != 1 {
		t.Errorf("Publish WithID with another local subscriber = %d, %v; want 1", n, err)
	}
	if _, err := b.SubscribeOwn("*:x", func(Message) {}); !errors.Is(err, ErrPattern) {
		t.Errorf("SubscribeOwn of a wildcard family: %v", err)
	}
}
