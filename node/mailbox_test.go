package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/mailbox"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// Key indexes of the mailbox tests' agents.
const (
	mbRelay  = 61
	mbSender = 62
	mbAgent  = 63
)

// inboxLog records the direct messages a node processes, with their
// verified sender.
type inboxLog struct {
	mu  sync.Mutex
	got []string // "<from> <message id> <subject>"
	ids []string
}

func (l *inboxLog) handler(_ context.Context, from peer.ID, m protocol.AgentMessage) (json.RawMessage, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, fmt.Sprintf("%s %s %s", from, m.MessageID, m.Subject))
	l.ids = append(l.ids, m.MessageID)
	return nil, nil
}

func (l *inboxLog) messageIDs() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.ids...)
}

func (l *inboxLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.got...)
}

// mailboxRelay starts a relay with a mailbox service and returns it, its
// store and its address.
func mailboxRelay(t *testing.T, opts ...mailbox.Option) (*node.Node, *store.Store) {
	t.Helper()
	st := openStore(t, filepath.Join(t.TempDir(), "relay.db"))
	r := meshtest.Node(t, mbRelay, node.WithStore(st), node.WithMailboxService(opts...))
	return r, st
}

// heldFor counts the items a relay's mailbox holds for agent to.
func heldFor(t *testing.T, st *store.Store, to peer.ID) int {
	t.Helper()
	n, err := st.CountFor(context.Background(), mailbox.Queue, to.String())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// agentWithMailbox starts the agent whose mailbox is r, then connects
// sender to it (so the sender has its hello) and closes it.
func agentWithMailboxGone(t *testing.T, r, sender *node.Node) peer.ID {
	t.Helper()
	b := meshtest.Node(t, mbAgent, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "agent.db"))), node.WithMailboxes(r.Addrs()[0]))
	meshtest.Connect(t, sender, b)
	id := b.ID()
	// The relay takes mail only for an agent it has registered.
	wait.ForTrue(t, 20*time.Second, "the relay has not registered the agent", func() bool { return node.HoldsMailFor(r, id) })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	return id
}

func send(t *testing.T, from *node.Node, to peer.ID, id string) error {
	t.Helper()
	_, err := from.SendMessage(meshtest.Context(t, 20*time.Second), to.String(),
		protocol.AgentMessage{MessageID: id, Subject: "while you were away"}, 2*time.Second)
	return err
}

// TestMailboxDeliversBetweenAgentsNeverOnlineTogether: B names relay R
// as its mailbox and goes offline; A, who saw B's hello, sends: the
// message is deposited at R and leaves A's outbox; A goes offline too;
// B comes back, fetches from R and gets the message exactly once,
// verified as A's, and R holds nothing more.
func TestMailboxDeliversBetweenAgentsNeverOnlineTogether(t *testing.T) {
	r, rst := mailboxRelay(t)
	ast := openStore(t, filepath.Join(t.TempDir(), "sender.db"))
	a := meshtest.Node(t, mbSender, node.WithStore(ast))
	b := agentWithMailboxGone(t, r, a)

	err := send(t, a, b, "m-1")
	var qe *node.QueuedError
	if !errors.As(err, &qe) || qe.Mailbox != r.ID() {
		t.Fatalf("send to an agent away: %v, want queued in its mailbox on %s", err, r.ID())
	}
	if n := queuedFor(t, ast, b.String()); n != 0 {
		t.Fatalf("the sender's outbox still holds %d messages handed over", n)
	}
	if n := heldFor(t, rst, b); n != 1 {
		t.Fatalf("the mailbox holds %d, want 1", n)
	}
	aID := a.ID()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	var log inboxLog
	meshtest.Node(t, mbAgent, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "agent2.db"))),
		node.WithMailboxes(r.Addrs()[0]), node.WithMessageHandler(log.handler))
	want := fmt.Sprintf("[%s m-1 while you were away]", aID)
	wait.For(t, 20*time.Second, func() error {
		if got := fmt.Sprint(log.list()); got != want {
			return fmt.Errorf("got %s, want %s", got, want)
		}
		if n := heldFor(t, rst, b); n != 0 {
			return fmt.Errorf("the mailbox still holds %d", n)
		}
		return nil
	})
	wait.Holds(t, 500*time.Millisecond, func() error {
		if got := fmt.Sprint(log.list()); got != want {
			return fmt.Errorf("got %s, want %s once", got, want)
		}
		return nil
	})
}

// TestMailboxTamperedEnvelopeRejected: an envelope the relay altered (or
// that never verified) is rejected by its recipient and removed; the
// genuine message next to it is delivered.
func TestMailboxTamperedEnvelopeRejected(t *testing.T) {
	r, rst := mailboxRelay(t)
	b := meshtest.ID(t, mbAgent)
	signer, err := sign.NewSigner(meshtest.Key(t, mbSender))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, subject := range []string{"pay 10 coins", "pay 10 coins"} {
		params, _ := json.Marshal(protocol.AgentMessage{MessageID: fmt.Sprint("m-", i), Subject: subject})
		e, err := protocol.NewEnvelope(protocol.TypeRequest, &protocol.Recipient{AgentID: b.String()},
			&protocol.Request{Action: protocol.MessageCapability, CorrelationID: fmt.Sprint("m-", i), Params: params})
		if err != nil {
			t.Fatal(err)
		}
		body, sig, err := protocol.Seal(signer, e)
		if err != nil {
			t.Fatal(err)
		}
		doc, _ := protocol.SignedJSON(body, sig)
		if i == 0 {
			doc = bytes.Replace(doc, []byte("pay 10"), []byte("pay 99"), 1)
		}
		// Straight into the relay's store: the relay is the adversary.
		m := store.Message{ID: fmt.Sprintf("%s/%s/%d", b, signer.ID(), i), Queue: mailbox.Queue, Topic: "agent:" + b.String(),
			To: b.String(), Payload: doc, NextAttempt: now.Add(time.Hour), Expires: now.Add(time.Hour)}
		if err := rst.EnqueueWithin(context.Background(), m, store.Bounds{}); err != nil {
			t.Fatal(err)
		}
	}
	var log inboxLog
	meshtest.Node(t, mbAgent, node.WithMailboxes(r.Addrs()[0]), node.WithMessageHandler(log.handler))
	want := fmt.Sprintf("[%s m-1 pay 10 coins]", signer.ID())
	wait.For(t, 20*time.Second, func() error {
		if got := fmt.Sprint(log.list()); got != want {
			return fmt.Errorf("got %s, want %s", got, want)
		}
		if n := heldFor(t, rst, b); n != 0 {
			return fmt.Errorf("the mailbox still holds %d", n)
		}
		return nil
	})
}

// TestMailboxFullIsReported: a deposit past the mailbox's bounds is
// refused as full; the sender hears so and keeps the message in its
// outbox.
func TestMailboxFullIsReported(t *testing.T) {
	r, rst := mailboxRelay(t, mailbox.WithBounds(1, 1<<20, 1<<20))
	ast := openStore(t, filepath.Join(t.TempDir(), "sender.db"))
	a := meshtest.Node(t, mbSender, node.WithStore(ast))
	b := agentWithMailboxGone(t, r, a)

	var qe *node.QueuedError
	if err := send(t, a, b, "m-1"); !errors.As(err, &qe) || qe.Mailbox != r.ID() {
		t.Fatalf("first send: %v, want it in the mailbox", err)
	}
	err := send(t, a, b, "m-2")
	if !errors.As(err, &qe) || qe.Mailbox != "" || !errors.Is(qe.MailboxErr, mailbox.ErrFull) {
		t.Fatalf("second send: %v, want queued with a full mailbox", err)
	}
	if n := queuedFor(t, ast, b.String()); n != 1 {
		t.Fatalf("the sender's outbox holds %d, want the message the mailbox refused", n)
	}
	if n := heldFor(t, rst, b); n != 1 {
		t.Fatalf("the mailbox holds %d, want 1", n)
	}
}

// TestMailboxLearntFromHeartbeats: a sender that never exchanged a hello
// with the agent, only heard its heartbeats through the mesh, leaves its
// message in the agent's mailbox too.
func TestMailboxLearntFromHeartbeats(t *testing.T) {
	r, rst := mailboxRelay(t)
	fast := node.WithPresence(node.Presence{Interval: 100 * time.Millisecond})
	b := meshtest.Node(t, mbAgent, node.WithMailboxes(r.Addrs()[0]), fast)
	a := meshtest.Node(t, mbSender, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "sender.db"))), fast)
	meshtest.Connect(t, b, r)
	meshtest.Connect(t, a, r)
	wait.For(t, 20*time.Second, func() error {
		for _, p := range a.Peers() {
			if p.AgentID == b.AgentID() && p.Status != "" {
				return nil
			}
		}
		return errors.New("A has not heard B's heartbeat")
	})
	bID := b.ID()
	if _, ok := a.PeerCapabilities(bID); ok {
		t.Fatal("A has B's hello; the test needs it not to")
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	var qe *node.QueuedError
	if err := send(t, a, bID, "m-hb"); !errors.As(err, &qe) || qe.Mailbox != r.ID() {
		t.Fatalf("send: %v, want it in B's mailbox", err)
	}
	if n := heldFor(t, rst, bID); n != 1 {
		t.Fatalf("the mailbox holds %d, want 1", n)
	}
}

// TestMailboxAfterSenderRestart: a message a full mailbox refused waits
// in the sender's outbox with the mailboxes it was meant for; after the
// sender's node restarts, knowing nothing of the agent, its outbox hands
// the message to the mailbox, which has room again, and the agent gets
// it: sender and agent are never online together.
func TestMailboxAfterSenderRestart(t *testing.T) {
	r, rst := mailboxRelay(t, mailbox.WithBounds(1, 1<<20, 1<<20))
	path := filepath.Join(t.TempDir(), "sender.db")
	ast := openStore(t, path)
	a := meshtest.Node(t, mbSender, node.WithStore(ast))
	b := agentWithMailboxGone(t, r, a)
	var qe *node.QueuedError
	if err := send(t, a, b, "m-1"); !errors.As(err, &qe) || qe.Mailbox != r.ID() {
		t.Fatalf("first send: %v", err)
	}
	if err := send(t, a, b, "m-2"); !errors.As(err, &qe) || !errors.Is(qe.MailboxErr, mailbox.ErrFull) {
		t.Fatalf("second send: %v, want a full mailbox", err)
	}
	if err := errors.Join(a.Close(), ast.Close()); err != nil {
		t.Fatal(err)
	}

	// The agent comes back, takes the first message and goes away again.
	var log inboxLog
	agent := func() *node.Node {
		return meshtest.Node(t, mbAgent, node.WithMailboxes(r.Addrs()[0]), node.WithMessageHandler(log.handler))
	}
	got := func(want ...string) func() error {
		return func() error {
			if ids := log.messageIDs(); fmt.Sprint(ids) != fmt.Sprint(want) {
				return fmt.Errorf("got %v, want %v", ids, want)
			}
			if n := heldFor(t, rst, b); n != 0 {
				return fmt.Errorf("the mailbox still holds %d", n)
			}
			return nil
		}
	}
	b2 := agent()
	wait.For(t, 20*time.Second, got("m-1"))
	if err := b2.Close(); err != nil {
		t.Fatal(err)
	}

	ast = openStore(t, path)
	a = meshtest.Node(t, mbSender, node.WithStore(ast))
	wait.For(t, 20*time.Second, func() error {
		if n := queuedFor(t, ast, b.String()); n != 0 {
			return fmt.Errorf("the restarted sender's outbox holds %d", n)
		}
		return nil
	})
	if n := heldFor(t, rst, b); n != 1 {
		t.Fatalf("the mailbox holds %d, want the second message", n)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	agent()
	wait.For(t, 20*time.Second, got("m-1", "m-2"))
}

// TestMailboxDepositRightAfterRelayRestart: a sender that found its
// recipient's mailbox relay down (the message stays in its outbox)
// deposits there again as soon as the relay is back at its address, not
// after libp2p's dial backoff from the failed dials (seconds, growing to
// minutes): a relay that restarts keeps taking mail.
func TestMailboxDepositRightAfterRelayRestart(t *testing.T) {
	r, rst := mailboxRelay(t)
	addr := r.Host().Addrs()[0]
	a := meshtest.Node(t, mbSender, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "sender.db"))))
	b := agentWithMailboxGone(t, r, a)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	err := send(t, a, b, "while-down")
	var qe *node.QueuedError
	if !errors.As(err, &qe) || qe.Mailbox != "" {
		t.Fatalf("send while the relay is down: %v, want queued in the outbox only", err)
	}
	r = meshtest.Node(t, mbRelay, node.WithStore(rst), node.WithMailboxService(), node.WithListenAddrs(addr))
	err = send(t, a, b, "after-restart")
	if !errors.As(err, &qe) || qe.Mailbox != r.ID() {
		t.Fatalf("send once the relay is back: %v, want queued in the mailbox on %s", err, r.ID())
	}
}

// TestMailboxUnansweredDepositNeverDeliveredDirectly (issue 23): a
// deposit the relay took but whose answer was lost leaves the message in
// the sender's outbox, unsure. Once the agent is back the sender must not
// deliver it directly: the agent remembers across a restart only what it
// ran from a mailbox, so the direct run and, after a restart, the mailbox
// copy would both run. The sender deposits it again instead, and the
// agent, reading both copies, runs it once. On the code that delivered
// directly, the outbox made an attempt at the agent.
func TestMailboxUnansweredDepositNeverDeliveredDirectly(t *testing.T) {
	r, rst := mailboxRelay(t)
	ast := openStore(t, filepath.Join(t.TempDir(), "sender.db"))
	a := meshtest.Node(t, mbSender, node.WithStore(ast), node.WithOutboxRetry(200*time.Millisecond))
	b := agentWithMailboxGone(t, r, a)
	node.LoseMailboxAnswers(a, 1)

	err := send(t, a, b, "m-1")
	var qe *node.QueuedError
	if !errors.As(err, &qe) || qe.Mailbox != "" || !errors.Is(qe.MailboxErr, mailbox.ErrUnanswered) {
		t.Fatalf("send with the deposit's answer lost: %v, want queued, the mailbox unsure", err)
	}
	if n := heldFor(t, rst, b); n != 1 {
		t.Fatalf("the mailbox holds %d, want the deposit whose answer was lost", n)
	}

	var log inboxLog
	back := meshtest.Node(t, mbAgent, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "agent.db"))),
		node.WithMailboxes(r.Addrs()[0]), node.WithMessageHandler(log.handler), node.WithOutboxRetry(200*time.Millisecond))
	meshtest.Connect(t, a, back)
	want := fmt.Sprintf("[%s m-1 while you were away]", a.ID())
	wait.For(t, 30*time.Second, func() error {
		if got := fmt.Sprint(log.list()); got != want {
			return fmt.Errorf("got %s, want %s", got, want)
		}
		if n := queuedFor(t, ast, b.String()); n != 0 {
			return fmt.Errorf("the sender's outbox still holds %d", n)
		}
		if n := heldFor(t, rst, b); n != 0 {
			return fmt.Errorf("the mailbox still holds %d", n)
		}
		return nil
	})
	if n := node.OutboxAttempts(a); n != 0 {
		t.Fatalf("the sender made %d direct attempts at the agent, want none after an unanswered deposit", n)
	}
	wait.Holds(t, 500*time.Millisecond, func() error {
		if got := fmt.Sprint(log.list()); got != want {
			return fmt.Errorf("got %s, want %s once", got, want)
		}
		return nil
	})
}
