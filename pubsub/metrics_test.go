package pubsub

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
)

// TestMetrics counts a local publish delivered to two subscriptions, and
// a forged, a stale and a valid message from a raw GossipSub peer.
func TestMetrics(t *testing.T) {
	ha, hb := newHost(t), newHost(t)
	reg := prometheus.NewRegistry()
	bus := newBus(t, ha, WithMetrics(reg))
	ch := collect(t, bus, "inbound:*")
	collect(t, bus, "inbound:x")

	if _, err := bus.Publish(context.Background(), "inbound:x", payload("local")); err != nil {
		t.Fatal(err)
	}
	recv(t, ch, "local")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	raw, err := libp2ppubsub.NewGossipSub(ctx, hb,
		libp2ppubsub.WithMessageSignaturePolicy(libp2ppubsub.StrictNoSign),
		libp2ppubsub.WithMessageIdFn(MessageID))
	if err != nil {
		t.Fatal(err)
	}
	topic, err := raw.Join(GossipTopic("inbound:"))
	if err != nil {
		t.Fatal(err)
	}
	defer topic.Close()
	connect(t, ha, hb)
	wait.For(t, 15*time.Second, func() error {
		if len(topic.ListPeers()) == 0 {
			return errors.New("the raw topic has no peer")
		}
		return nil
	})
	attacker, victim := newSigner(t), newSigner(t)
	vb, _ := sealed(t, victim, "inbound:x", "forged")
	e, _ := protocol.NewEnvelope(protocol.TypeNotify, &protocol.Recipient{Broadcast: true, Topic: "inbound:x"}, payload("stale"))
	e.Timestamp = protocol.FormatTime(time.Now().Add(-time.Hour))
	sb, ssig, err := protocol.Seal(attacker, e)
	if err != nil {
		t.Fatal(err)
	}
	mb, msig := sealed(t, attacker, "inbound:y", "marker")
	for i, d := range [][]byte{wire(attacker.Sign(vb), vb), wire(ssig, sb), wire(msig, mb)} {
		if err := topic.Publish(ctx, d); err != nil {
			t.Fatalf("raw publish %d: %v", i, err)
		}
	}
	recv(t, ch, "marker")

	c := func(v *prometheus.CounterVec, labels ...string) float64 {
		return testutil.ToFloat64(v.WithLabelValues(labels...))
	}
	m := bus.met
	wait.For(t, 10*time.Second, func() error {
		if got := c(m.rejected, "inbound", rejectSignature) + c(m.rejected, "inbound", rejectReplay); got < 2 {
			return fmt.Errorf("%v rejections counted, want 2", got)
		}
		return nil
	})
	for _, w := range []struct {
		what string
		got  float64
		want float64
	}{
		{"published", c(m.published, "inbound"), 1},
		{"delivered", c(m.delivered, "inbound"), 3}, // the local message twice, the marker once
		{"dropped", c(m.dropped, "inbound"), 0},
		{"rejected: signature", c(m.rejected, "inbound", rejectSignature), 1},
		{"rejected: replay", c(m.rejected, "inbound", rejectReplay), 1},
	} {
		if w.got != w.want {
			t.Errorf("%s: %v, want %v", w.what, w.got, w.want)
		}
	}
	if n := testutil.CollectAndCount(m.rejected); n != 2 {
		t.Errorf("%d rejection series, want 2 (one family, two reasons)", n)
	}
}

func TestMetricsRegisteredOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	newBus(t, newHost(t), WithMetrics(reg))
	if b, err := New(newHost(t), newSigner(t), WithMetrics(reg)); err == nil {
		b.Close()
		t.Fatal("a second router on the same registry was accepted")
	}
}
