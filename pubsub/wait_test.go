package pubsub

import (
	"context"
	"testing"
	"time"
)

// A waiting Publish counts again when a peer joins the topic or a local
// subscription is added: it returns as soon as there is a receiver, long
// before its wait ends.

func TestPublishWaitsForTopicPeer(t *testing.T) {
	ha, hb := newHost(t), newHost(t)
	a, b := newBus(t, ha), newBus(t, hb)
	connect(t, ha, hb)
	type result struct {
		n   int
		err error
		d   time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		n, err := a.Publish(context.Background(), "late:x", payload("waited"), WithWait(time.Minute))
		done <- result{n, err, time.Since(start)}
	}()
	in := collect(t, b, "late:*") // b joins the topic while a waits
	r := <-done
	if r.err != nil || r.n != 1 {
		t.Fatalf("Publish = %d, %v; want the peer that joined", r.n, r.err)
	}
	if r.d > 30*time.Second {
		t.Errorf("Publish returned after %s: the join did not wake it", r.d)
	}
	if m := recv(t, in, "the message on b"); mark(m) != "waited" {
		t.Errorf("b got %q", mark(m))
	}
}

func TestPublishWaitsForLocalSubscription(t *testing.T) {
	b := newBus(t, newHost(t))
	done := make(chan int, 1)
	started := make(chan struct{})
	go func() {
		close(started)
		n, _ := b.Publish(context.Background(), "late:y", payload("mine"), WithWait(time.Minute))
		done <- n
	}()
	<-started
	in := collect(t, b, "late:y")
	if n := <-done; n != 1 {
		t.Fatalf("Publish = %d, want the local subscription", n)
	}
	if m := recv(t, in, "the local copy"); mark(m) != "mine" {
		t.Errorf("got %q", mark(m))
	}
}
