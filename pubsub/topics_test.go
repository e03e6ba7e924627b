package pubsub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/meshagent/meshagent/internal/p2ptest"
	"github.com/meshagent/meshagent/internal/wait"
	"sync/atomic"
	"testing"
	"time"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

func TestMain(m *testing.M) { p2ptest.VerifyTestMain(m) }

func newHost(t testing.TB) host.Host {
	t.Helper()
	return p2ptest.Host(t)
}

func newSigner(t testing.TB) *sign.Signer {
	t.Helper()
	k, err := sign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := sign.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testPublishWait is how long a test's Publish waits for receivers unless
// the test sets its own wait: under the full suite's race-detector load on
// two cores, the router's streams to a new peer can take longer than the
// default 5 s, and a publish that finds its receiver sooner returns sooner.
const testPublishWait = 30 * time.Second

func newBus(t testing.TB, h host.Host, opts ...Option) *Topics {
	t.Helper()
	b, err := New(h, newSigner(t), append([]Option{WithPublishWait(testPublishWait)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func connect(t testing.TB, a, b host.Host) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Connect(ctx, peer.AddrInfo{ID: b.ID(), Addrs: b.Addrs()}); err != nil {
		t.Fatal(err)
	}
}

func collect(t testing.TB, b *Topics, pattern string) <-chan Message {
	t.Helper()
	ch := make(chan Message, 64)
	if _, err := b.Subscribe(pattern, func(m Message) { ch <- m }); err != nil {
		t.Fatal(err)
	}
	return ch
}

func recv(t testing.TB, ch <-chan Message, what string) Message {
	t.Helper()
	select {
	case m := <-ch:
		return m
	case <-time.After(15 * time.Second):
		t.Fatalf("no message: %s", what)
		return Message{}
	}
}

func payload(s string) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"m":%q}`, s)) }

func mark(m Message) string {
	var p struct{ M string }
	_ = json.Unmarshal(m.Payload, &p)
	return p.M
}

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, topic string
		want           bool
	}{
		{"inbound:chat-1", "inbound:chat-1", true},
		{"inbound:chat-1", "inbound:chat-10", false},
		{"inbound:*", "inbound:chat-1", true},
		{"inbound:*", "outbound:chat-1", false},
		{"task:?-1", "task:a-1", true},
		{"task:?-1", "task:ab-1", false},
		{"task:[ab]-1", "task:b-1", true},
		{"inbound:", "inbound:x", true},
		{"inbound:chat-", "inbound:chat-7", true},
		{"inbound:chat-", "inbound:chax-7", false},
		{"agent.", "agent.x", true},
		{"agent/", "agent/x", true},
		{"agent_", "agent_x", true},
		{"agent", "agent_x", false},
		{"task:[", "task:[", false},
	} {
		if got := Match(c.pattern, c.topic); got != c.want {
			t.Errorf("Match(%q, %q) = %v, want %v", c.pattern, c.topic, got, c.want)
		}
	}
	if g := GossipTopic("inbound:chat-1"); g != "/meshagent/topic/inbound" {
		t.Errorf("GossipTopic = %q", g)
	}
	if g := GossipTopic("plain"); g != "/meshagent/topic/plain" {
		t.Errorf("GossipTopic = %q", g)
	}
}

func TestWildFamilyRefused(t *testing.T) {
	b := newBus(t, newHost(t))
	for _, p := range []string{"*", "in*:x", "", "task:["} {
		if _, err := b.Subscribe(p, func(Message) {}); !errors.Is(err, ErrPattern) {
			t.Errorf("Subscribe(%q) = %v, want ErrPattern", p, err)
		}
	}
}

// TestMeshWide: ten nodes in a ring; patterns on X receive the first
// message ever published to a topic on a node far away.
func TestMeshWide(t *testing.T) {
	const n = 10
	hosts := make([]host.Host, n)
	buses := make([]*Topics, n)
	for i := range hosts {
		hosts[i] = newHost(t)
		buses[i] = newBus(t, hosts[i])
	}
	for i := range hosts {
		connect(t, hosts[i], hosts[(i+1)%n])
	}
	wild := collect(t, buses[0], "inbound:*")
	prefix := collect(t, buses[3], "inbound:never-")
	exact := collect(t, buses[7], "inbound:never-used-1")
	other := collect(t, buses[8], "inbound:other")
	for i := range buses {
		if i != 0 && i != 3 && i != 7 && i != 8 {
			collect(t, buses[i], "inbound:nobody-")
		}
	}
	for i, b := range buses {
		// Topic peers are not enough: a node forwards only to its mesh, so
		// wait until every node has grafted both ring neighbours.
		wait.For(t, 15*time.Second, func() error {
			if p, m := len(b.Peers("inbound:")), b.MeshPeers("inbound:"); p < 2 || m < 2 {
				return fmt.Errorf("node %d has %d topic peers and %d mesh peers, want 2 of each", i, p, m)
			}
			return nil
		})
	}
	got, err := buses[5].Publish(context.Background(), "inbound:never-used-1", payload("first"))
	if err != nil || got < 1 {
		t.Fatalf("Publish = %d, %v", got, err)
	}
	for _, c := range []struct {
		name string
		ch   <-chan Message
	}{{"prefix", prefix}, {"exact", exact}, {"wildcard", wild}} {
		name, ch := c.name, c.ch
		m := recv(t, ch, name)
		if mark(m) != "first" || m.Topic != "inbound:never-used-1" || m.From != buses[5].signer.ID() {
			t.Errorf("%s got %q on %q from %s", name, mark(m), m.Topic, m.From)
		}
	}
	if _, err := buses[5].Publish(context.Background(), "inbound:other", payload("second")); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, other, "exact other"); mark(m) != "second" {
		t.Errorf("inbound:other subscriber got %q first", mark(m))
	}
	if m := recv(t, wild, "wildcard second"); mark(m) != "second" {
		t.Errorf("wildcard got %q", mark(m))
	}
}

func sealed(t testing.TB, s *sign.Signer, topic, msg string) (body, sig []byte) {
	t.Helper()
	e, err := protocol.NewEnvelope(protocol.TypeNotify, &protocol.Recipient{Broadcast: true, Topic: topic}, payload(msg))
	if err != nil {
		t.Fatal(err)
	}
	body, sig, err = protocol.Seal(s, e)
	if err != nil {
		t.Fatal(err)
	}
	return body, sig
}

func wire(sig, body []byte) []byte { return append(append([]byte{}, sig...), body...) }

// TestInvalidDropped injects bad messages with a raw GossipSub publisher;
// the subscriber's first message must be the valid marker sent last.
func TestInvalidDropped(t *testing.T) {
	ha, hb := newHost(t), newHost(t)
	bus := newBus(t, ha, WithMaxMessageSize(4096))
	ch := collect(t, bus, "inbound:*")

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
	ub, _ := sealed(t, attacker, "inbound:x", "unsigned")
	big := make([]byte, 5000)
	for i := range big {
		big[i] = 'a'
	}
	ob, osig := sealed(t, attacker, "inbound:x", string(big))
	wb, wsig := sealed(t, attacker, "outbound:x", "wrong family")
	bad := [][]byte{
		[]byte("garbage"),
		wire(make([]byte, 64), []byte(`{"not":"an envelope"}`)),
		wire(attacker.Sign(vb), vb),              // signed by another key than from.agentId
		wire(make([]byte, 64), ub),               // unsigned
		append(wire(attacker.Sign(ub), ub), ' '), // signature does not cover the bytes
		wire(osig, ob),                           // oversize
		wire(wsig, wb),                           // to.topic of another family
	}
	for i, d := range bad {
		if err := topic.Publish(ctx, d); err != nil {
			t.Fatalf("raw publish %d: %v", i, err)
		}
	}
	mb, msig := sealed(t, attacker, "inbound:x", "marker")
	if err := topic.Publish(ctx, wire(msig, mb)); err != nil {
		t.Fatal(err)
	}
	if m := recv(t, ch, "marker"); mark(m) != "marker" {
		t.Fatalf("first delivered message is %q, want the marker", mark(m))
	}
}

func TestValidateReplayAndStale(t *testing.T) {
	b := newBus(t, newHost(t))
	s := newSigner(t)
	body, sig := sealed(t, s, "inbound:x", "once")
	now := time.Now()
	if _, r, _ := b.validate("inbound", wire(sig, body), now); r != libp2ppubsub.ValidationAccept {
		t.Fatalf("first: %v", r)
	}
	if _, r, _ := b.validate("inbound", wire(sig, body), now); r != libp2ppubsub.ValidationIgnore {
		t.Fatalf("replay: %v", r)
	}
	e, _ := protocol.NewEnvelope(protocol.TypeNotify, &protocol.Recipient{Broadcast: true, Topic: "inbound:x"}, payload("old"))
	e.Timestamp = protocol.FormatTime(now.Add(-time.Hour))
	ob, osig, err := protocol.Seal(s, e)
	if err != nil {
		t.Fatal(err)
	}
	if _, r, _ := b.validate("inbound", wire(osig, ob), now); r != libp2ppubsub.ValidationIgnore {
		t.Fatalf("stale: %v", r)
	}
	e, _ = protocol.NewEnvelope(protocol.TypeNotify, &protocol.Recipient{Broadcast: true, Topic: "outbound:x"}, payload("other family"))
	rb, rsig, err := protocol.Seal(s, e)
	if err != nil {
		t.Fatal(err)
	}
	if _, r, _ := b.validate("inbound", wire(rsig, rb), now); r != libp2ppubsub.ValidationReject {
		t.Fatalf("other family: %v", r)
	}
}

func TestFilters(t *testing.T) {
	ha, hb := newHost(t), newHost(t)
	pub := newBus(t, ha)
	subSigner := newSigner(t)
	sub, err := New(hb, subSigner, WithSelf(Self{AgentID: subSigner.ID().String(), PersonaType: "qa", Capabilities: []string{"code", "review"}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sub.Close() })
	ch := collect(t, sub, "task:")
	connect(t, ha, hb)
	me, other := subSigner.ID().String(), newSigner(t).ID().String()
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		f      Filter
		admits bool
	}{
		{"exclude me", Filter{ExcludeAgents: []string{me}}, false},
		{"include other", Filter{IncludeAgents: []string{other}}, false},
		{"persona dev", Filter{PersonaTypes: []string{"dev"}}, false},
		{"capability deploy", Filter{Capabilities: []string{"code", "deploy"}}, false},
		{"include me", Filter{IncludeAgents: []string{other, me}}, true},
		{"exclude other", Filter{ExcludeAgents: []string{other}}, true},
		{"persona qa", Filter{PersonaTypes: []string{"dev", "qa"}}, true},
		{"capabilities held", Filter{Capabilities: []string{"review"}}, true},
		{"empty", Filter{}, true},
	} {
		if _, err := pub.Publish(ctx, "task:1", payload(c.name), WithFilter(c.f)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if c.admits {
			if m := recv(t, ch, c.name); mark(m) != c.name {
				t.Errorf("got %q, want %q (an excluded message was delivered)", mark(m), c.name)
			}
		}
	}
}

func TestPublishNoPeers(t *testing.T) {
	b := newBus(t, newHost(t), WithPublishWait(300*time.Millisecond))
	start := time.Now()
	n, err := b.Publish(context.Background(), "inbound:x", payload("lost?"))
	if !errors.Is(err, ErrNoPeers) || n != 0 {
		t.Fatalf("Publish = %d, %v; want ErrNoPeers", n, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Publish took %s", d)
	}
}

// A Publish waiting for receivers counts again when the router opens its
// stream to a peer: the router lists a peer whose subscription arrived
// first only from then on, and no other event may follow (the flake this
// pins: the subscriber had joined 0.2 ms in, and a 30 s wait saw none).
func TestPublishWaitWakesOnRouterStream(t *testing.T) {
	b := newBus(t, newHost(t))
	b.mu.Lock()
	f, err := b.join("task")
	b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	var receivers atomic.Int32
	counted := make(chan struct{}, 2)
	done := make(chan int, 1)
	go func() {
		_, n, _ := b.waitPeers(context.Background(), f.topic, 1, time.Minute, func() int {
			n := int(receivers.Load())
			select {
			case counted <- struct{}{}:
			default:
			}
			return n
		})
		done <- n
	}()
	// Counted twice (before and after it began to listen): the wait
	// is waiting. A stand-in for a receiver the router now lists, which
	// the count sees only if something wakes the wait.
	wait.Receive(t, 10*time.Second, counted, "the first count")
	wait.Receive(t, 10*time.Second, counted, "the count after listening")
	receivers.Store(1)
	b.mesh.OnNewOutboundStream("", "")
	if n := wait.Receive(t, 10*time.Second, done, "the wait to count again"); n != 1 {
		t.Fatalf("counted %d receivers, want 1", n)
	}
}
