package node_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/p2ptest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/mailbox"
	"github.com/meshagent/meshagent/metrics"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// TestMailboxFloodOfThrowawaySenders is the attack on an agent's mailbox:
// ten throwaway identities, each within its tenth, fill it with requests
// for a capability the agent never serves. The agent comes online, finds
// no handler for them and defers them; an hour later an honest sender
// still leaves its message in the mailbox (on the code before the defer,
// the mailbox stayed full for the whole TTL), the agent gets it, and the
// flood item it displaced is counted in the relay's metrics.
func TestMailboxFloodOfThrowawaySenders(t *testing.T) {
	const capacity = 10
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	rm := metrics.New()
	rst := openStore(t, filepath.Join(t.TempDir(), "relay.db"))
	r := meshtest.Node(t, mbRelay, node.WithStore(rst), node.WithMetrics(rm), node.WithMailboxService(
		mailbox.WithBounds(capacity, 1<<20, 1<<20), mailbox.WithSenderBounds(capacity/10, 1<<20), mailbox.WithReserve(0, 0), mailbox.WithClock(clock)))
	b := meshtest.ID(t, mbAgent)
	registerAgent(t, r, rst, mbAgent)

	for i := range capacity {
		h := p2ptest.Host(t) // a fresh identity each
		h.Peerstore().AddAddrs(r.ID(), r.Addrs(), time.Hour)
		s, err := sign.NewSigner(h.Peerstore().PrivKey(h.ID()))
		if err != nil {
			t.Fatal(err)
		}
		env := sealRequest(t, s, b, &protocol.Request{Action: "never-served", CorrelationID: fmt.Sprint("flood-", i)})
		c := &mailbox.Client{Host: h}
		if err := c.Deposit(meshtest.Context(t, 10*time.Second), r.ID(), b, env); err != nil {
			t.Fatalf("throwaway sender %d: %v", i, err)
		}
	}

	// The agent comes online with no handler for the flood, and a sender
	// gets its hello.
	ast := openStore(t, filepath.Join(t.TempDir(), "sender.db"))
	a := meshtest.Node(t, mbSender, node.WithStore(ast))
	var log inboxLog
	agent := meshtest.Node(t, mbAgent, node.WithMailboxes(r.Addrs()[0]), node.WithMessageHandler(log.handler))
	meshtest.Connect(t, a, agent)
	wait.For(t, 20*time.Second, func() error {
		if n := deferredFor(t, rst, b); n != capacity {
			return fmt.Errorf("%d items deferred, want %d", n, capacity)
		}
		return nil
	})
	if err := agent.Close(); err != nil {
		t.Fatal(err)
	}

	now.Add(int64(mailbox.DefaultDisplaceAfter + time.Second))
	var qe *node.QueuedError
	if err := send(t, a, b, "honest"); !errors.As(err, &qe) || qe.Mailbox != r.ID() {
		t.Fatalf("the honest send: %v, want it in the mailbox on %s", err, r.ID())
	}
	if n := queuedFor(t, ast, b.String()); n != 0 {
		t.Fatalf("the sender's outbox still holds %d", n)
	}
	if m := scrape(t, rm); !strings.Contains(m, "meshagent_mailbox_displaced_total 1\n") {
		t.Fatalf("no displaced item in the relay's metrics:\n%s", m)
	}

	meshtest.Node(t, mbAgent, node.WithMailboxes(r.Addrs()[0]), node.WithMessageHandler(log.handler))
	wait.For(t, 20*time.Second, func() error {
		if ids := log.messageIDs(); fmt.Sprint(ids) != "[honest]" {
			return fmt.Errorf("got %v, want the honest message", ids)
		}
		if n := heldFor(t, rst, b); n != capacity-1 {
			return fmt.Errorf("the mailbox holds %d, want the rest of the flood", n)
		}
		return nil
	})
}

// deferredFor counts the items its agent deferred in a relay's mailbox.
func deferredFor(t *testing.T, st *store.Store, to peer.ID) int {
	t.Helper()
	ms, _, err := st.PendingFor(context.Background(), mailbox.Queue, to.String(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range ms {
		if !m.Left.IsZero() {
			n++
		}
	}
	return n
}

// sealRequest is a signed request from s to to, in its embedded JSON form.
func sealRequest(t *testing.T, s *sign.Signer, to peer.ID, req *protocol.Request) []byte {
	t.Helper()
	e, err := protocol.NewEnvelope(protocol.TypeRequest, &protocol.Recipient{AgentID: to.String()}, req)
	if err != nil {
		t.Fatal(err)
	}
	body, sig, err := protocol.Seal(s, e)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := protocol.SignedJSON(body, sig)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// registerAgent starts agent i naming relay r as its mailbox until r holds
// mail for it, then stops it.
func registerAgent(t *testing.T, r *node.Node, rst *store.Store, i int) {
	t.Helper()
	agent := meshtest.Node(t, i, node.WithMailboxes(r.Addrs()[0]))
	wait.For(t, 20*time.Second, func() error {
		if _, ok, err := rst.Marked(context.Background(), mailbox.AgentsScope, agent.ID().String(), time.Now()); err != nil || !ok {
			return fmt.Errorf("relay holds no mail for the agent yet (%v)", err)
		}
		return nil
	})
	if err := agent.Close(); err != nil {
		t.Fatal(err)
	}
}
