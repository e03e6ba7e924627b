package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/dht"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/p2ptest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/pubsub"
	"github.com/meshagent/meshagent/sign"
)

// heartbeat is the presence interval of mesh tests: peers turn stale
// after 3 of them and are dropped after 10.
const heartbeat = 250 * time.Millisecond

// line starts n nodes bootstrapped in a line (node i knows only node i-1),
// with the DHT, topics and fast heartbeats; extra(i) adds options.
func line(t *testing.T, n, firstKey int, extra func(i int) []node.Option) []*node.Node {
	t.Helper()
	var nodes []*node.Node
	for i := range n {
		opts := []node.Option{
			node.WithDHT(true),
			node.WithDHTOptions(dht.WithProviderTTL(4*time.Second), dht.WithReprovideInterval(time.Second)),
			node.WithPresence(node.Presence{Interval: heartbeat, PersonaType: fmt.Sprintf("persona-%d", i%3)}),
		}
		if i > 0 {
			opts = append(opts, node.WithBootstrap(nodes[i-1].Addrs()...))
		}
		if extra != nil {
			opts = append(opts, extra(i)...)
		}
		nodes = append(nodes, meshtest.Node(t, firstKey+i, opts...))
	}
	return nodes
}

// inbox collects the messages of one subscription.
type inbox struct {
	mu   sync.Mutex
	msgs []protocol.TopicMessage
}

func (b *inbox) add(m protocol.TopicMessage) {
	b.mu.Lock()
	b.msgs = append(b.msgs, m)
	b.mu.Unlock()
}

// texts returns the "text" field of each payload received, in order.
func (b *inbox) texts() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.msgs {
		var p struct{ Text string }
		_ = json.Unmarshal(m.Payload, &p)
		out = append(out, p.Text)
	}
	return out
}

func (b *inbox) has(text string) bool { return slices.Contains(b.texts(), text) }

func subscribe(t *testing.T, n *node.Node, pattern string) *inbox {
	t.Helper()
	in := &inbox{}
	cancel, err := n.Subscribe(pattern, in.add)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cancel)
	return in
}

func text(s string) json.RawMessage { return json.RawMessage(fmt.Sprintf(`{"text":%q}`, s)) }

// TestMesh runs twelve nodes in a line, so that no node knows all others,
// and checks the directory, topics and presence across the whole mesh.
func TestMesh(t *testing.T) {
	const n = 12
	translate := node.Service{Capability: protocol.Capability{Name: "translate", Keywords: []string{"language"}}, Handler: node.EchoHandler()}
	providers := map[int]bool{3: true, 8: true}
	nodes := line(t, n, 100, func(i int) []node.Option {
		if providers[i] {
			return []node.Option{node.WithServices(translate)}
		}
		return nil
	})
	byID := map[string]int{}
	for i, nd := range nodes {
		byID[nd.AgentID()] = i
	}

	t.Run("every node discovers every provider", func(t *testing.T) {
		for i, from := range nodes {
			var want []int
			for p := range providers {
				if p != i {
					want = append(want, p)
				}
			}
			sort.Ints(want)
			for _, byKeyword := range []bool{false, true} {
				query := map[bool]string{false: "translate", true: "language"}[byKeyword]
				wait.For(t, 60*time.Second, func() error {
					got, err := discover(from, query, byKeyword, byID)
					if err != nil {
						return err
					}
					if !slices.Equal(got, want) {
						return fmt.Errorf("node %d discovered %q at nodes %v, want %v", i, query, got, want)
					}
					return nil
				})
			}
		}
	})

	t.Run("wildcard subscriber receives the first message of a new topic", func(t *testing.T) {
		in := subscribe(t, nodes[0], "outbound:*")
		ctx := meshtest.Context(t, 60*time.Second)
		// The publisher is at the far end of the line and has never used
		// the topic; it finds the subscriber through the directory. The
		// DHT has probably connected the two: disconnect them, so that
		// no path of subscribers joins them.
		_ = nodes[n-1].Host().Network().ClosePeer(nodes[0].ID())
		peers, err := nodes[n-1].Publish(ctx, "outbound:42", text("first"), nil)
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		if peers < 1 {
			t.Fatalf("published to %d peers", peers)
		}
		wait.For(t, 20*time.Second, func() error {
			if got := in.texts(); !slices.Equal(got, []string{"first"}) {
				return fmt.Errorf("subscriber received %q", got)
			}
			return nil
		})
		in.mu.Lock()
		m := in.msgs[0]
		in.mu.Unlock()
		if m.Topic != "outbound:42" || m.From != nodes[n-1].AgentID() || m.ID == "" || m.Time.IsZero() {
			t.Fatalf("message %+v: want topic outbound:42 from %s with id and time", m, nodes[n-1].AgentID())
		}
	})

	t.Run("forged and unsigned messages are dropped", func(t *testing.T) {
		victim := nodes[5]
		in := subscribe(t, victim, "alerts:*")
		topic := rogue(t, victim, "alerts")
		attacker, impersonated := signer(t, 900), signer(t, 901)
		body := func(s *sign.Signer, msg string) []byte {
			e, err := protocol.NewEnvelope(protocol.TypeNotify, &protocol.Recipient{Broadcast: true, Topic: "alerts:x"}, text(msg))
			if err != nil {
				t.Fatal(err)
			}
			b, _, err := protocol.Seal(s, e)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
		wire := func(sig, b []byte) []byte { return append(append([]byte{}, sig...), b...) }
		forged, unsigned := body(impersonated, "forged"), body(attacker, "unsigned")
		ctx := meshtest.Context(t, 10*time.Second)
		for _, d := range [][]byte{
			wire(attacker.Sign(forged), forged),     // from.agentId is not the signer
			wire(make([]byte, 64), unsigned),        // no signature
			[]byte(`{"type":"notify","payload":1}`), // not an envelope at all
		} {
			if err := topic.Publish(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
		marker := body(attacker, "marker")
		if err := topic.Publish(ctx, wire(attacker.Sign(marker), marker)); err != nil {
			t.Fatal(err)
		}
		wait.For(t, 10*time.Second, func() error {
			if got := in.texts(); !slices.Equal(got, []string{"marker"}) {
				return fmt.Errorf("received %q, want only the marker", got)
			}
			return nil
		})
	})

	t.Run("broadcast filters", func(t *testing.T) {
		receivers := []int{0, 2, 3, 4, 6, 9}
		boxes := map[int]*inbox{}
		for _, i := range receivers {
			boxes[i] = subscribe(t, nodes[i], "team:")
		}
		// Every receiver must be reachable before filtered messages are
		// judged by who did not get them.
		ctx := meshtest.Context(t, 60*time.Second)
		wait.For(t, 30*time.Second, func() error {
			if _, err := nodes[11].Publish(ctx, "team:ready", text("ready"), nil); err != nil {
				return err
			}
			for i, b := range boxes {
				if !b.has("ready") {
					return fmt.Errorf("node %d has not received ready", i)
				}
			}
			return nil
		})
		id := func(i int) string { return nodes[i].AgentID() }
		cases := []struct {
			name   string
			filter protocol.Filter
			want   []int
		}{
			{"include", protocol.Filter{IncludeAgents: []string{id(2), id(9)}}, []int{2, 9}},
			{"exclude", protocol.Filter{ExcludeAgents: []string{id(0), id(4)}}, []int{2, 3, 6, 9}},
			{"persona", protocol.Filter{PersonaTypes: []string{"persona-0"}}, []int{0, 3, 6, 9}},
			{"capabilities", protocol.Filter{Capabilities: []string{"translate"}}, []int{3}},
			{"include and exclude", protocol.Filter{IncludeAgents: []string{id(4), id(6)}, ExcludeAgents: []string{id(6)}}, []int{4}},
		}
		for _, tc := range cases {
			if _, err := nodes[11].Publish(ctx, "team:"+tc.name, text(tc.name), &tc.filter); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
		}
		// A final unfiltered message: once every receiver has it, the
		// filtered ones published before it have had their chance.
		if _, err := nodes[11].Publish(ctx, "team:done", text("done"), nil); err != nil {
			t.Fatal(err)
		}
		wait.For(t, 20*time.Second, func() error {
			for i, b := range boxes {
				if !b.has("done") {
					return fmt.Errorf("node %d has not received done", i)
				}
			}
			for _, tc := range cases {
				var got []int
				for _, i := range receivers {
					if boxes[i].has(tc.name) {
						got = append(got, i)
					}
				}
				if !slices.Equal(got, tc.want) {
					return fmt.Errorf("filter %s reached %v, want %v", tc.name, got, tc.want)
				}
			}
			return nil
		})
	})

	t.Run("presence", func(t *testing.T) {
		last := nodes[n-1]
		// The last node hears every agent's heartbeat, though it is
		// connected to few of them.
		wait.For(t, 30*time.Second, func() error {
			heard := 0
			for _, pi := range last.Peers() {
				if _, ok := byID[pi.AgentID]; ok && pi.Status == protocol.StatusAvailable && !pi.LastHeartbeat.IsZero() {
					heard++
				}
			}
			if heard != n-1 {
				return fmt.Errorf("last node hears %d available agents, want %d", heard, n-1)
			}
			return nil
		})
		first := peerInfo(last, nodes[0].AgentID())
		if first.Name != "agent-100" || first.PersonaType != "persona-0" || len(first.Addrs) == 0 {
			t.Fatalf("node 0 as seen from the last node: %+v", first)
		}
		nodes[0].SetBusy(true)
		wait.For(t, 10*time.Second, func() error {
			if s := peerInfo(last, nodes[0].AgentID()).Status; s != protocol.StatusBusy {
				return fmt.Errorf("node 0 status %q, want busy", s)
			}
			return nil
		})
	})

	t.Run("a stopped agent turns stale, is dropped and is no longer discovered", func(t *testing.T) {
		observer, gone := nodes[0], nodes[8]
		if err := gone.Close(); err != nil {
			t.Fatal(err)
		}
		seen := map[protocol.PresenceStatus]bool{}
		wait.For(t, 30*time.Second, func() error {
			pi := peerInfo(observer, gone.AgentID())
			if pi.AgentID == "" {
				return nil // dropped
			}
			seen[pi.Status] = true
			return fmt.Errorf("stopped agent still listed, status %q", pi.Status)
		})
		if !seen[protocol.StatusStale] {
			t.Errorf("the stopped agent was dropped without being shown stale first (saw %v)", seen)
		}
		wait.For(t, 30*time.Second, func() error {
			got, err := discover(observer, "translate", false, byID)
			if err != nil {
				return err
			}
			if !slices.Equal(got, []int{3}) {
				return fmt.Errorf("discovered translate at nodes %v, want [3]", got)
			}
			return nil
		})
	})
}

// discover returns the node indexes that from discovers for a query.
func discover(from *node.Node, query string, byKeyword bool, byID map[string]int) ([]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := from.Discover(ctx, query, byKeyword)
	if err != nil {
		return nil, err
	}
	var got []int
	for pi := range ch {
		if len(pi.Capabilities) == 0 || pi.Capabilities[0].Name != "translate" {
			return nil, fmt.Errorf("%s listed with capabilities %+v", pi.AgentID, pi.Capabilities)
		}
		got = append(got, byID[pi.AgentID])
	}
	sort.Ints(got)
	return got, nil
}

func peerInfo(n *node.Node, agentID string) protocol.PeerInfo {
	for _, pi := range n.Peers() {
		if pi.AgentID == agentID {
			return pi
		}
	}
	return protocol.PeerInfo{}
}

// rogue connects a raw GossipSub router to victim, joined to a family's
// GossipSub topic, that publishes whatever bytes it is given.
func rogue(t testing.TB, victim *node.Node, family string) *libp2ppubsub.Topic {
	t.Helper()
	h := p2ptest.Host(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	raw, err := libp2ppubsub.NewGossipSub(ctx, h,
		libp2ppubsub.WithMessageSignaturePolicy(libp2ppubsub.StrictNoSign),
		libp2ppubsub.WithMessageIdFn(pubsub.MessageID))
	if err != nil {
		t.Fatal(err)
	}
	topic, err := raw.Join(pubsub.GossipTopic(family + ":"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = topic.Close() })
	if err := h.Connect(meshtest.Context(t, 30*time.Second), peer.AddrInfo{ID: victim.ID(), Addrs: victim.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, func() error {
		if len(topic.ListPeers()) == 0 {
			return errors.New("the victim is not yet a topic peer of the rogue")
		}
		return nil
	})
	return topic
}
