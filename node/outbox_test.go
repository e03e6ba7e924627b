package node_test

import (
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
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// receiver counts the direct messages a node processes, by message id.
type receiver struct {
	mu  sync.Mutex
	got map[string]int
}

func newReceiver(n *node.Node) *receiver {
	r := &receiver{got: map[string]int{}}
	n.OnMessage(func(_ context.Context, _ peer.ID, m protocol.AgentMessage) (json.RawMessage, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got[m.MessageID]++
		return nil, nil
	})
	return r
}

func (r *receiver) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[id]
}

func openStore(t *testing.T, path string) *store.Store {
	t.Helper()
	st, err := store.Open(path, store.WithPruneInterval(0), store.WithLogger(testlog.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// queuedFor returns what the node's outbox holds for agent to.
func queuedFor(t *testing.T, st *store.Store, to string) int {
	t.Helper()
	n, err := st.CountFor(context.Background(), "node", to)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// closedAgent starts node i, connects it to n (so n knows its addresses,
// as it would a peer it once talked to) and closes it: an agent that is
// down.
func closedAgent(t *testing.T, n *node.Node, i int) string {
	t.Helper()
	a := meshtest.Node(t, i)
	meshtest.Connect(t, n, a)
	id := a.AgentID()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestOutboxDeliversWhenTheAgentIsBack: a message to a closed node is
// queued (the error says so), survives a restart of the sender's node
// (a new Node on the reopened store), and is delivered once when a node
// with the recipient's identity comes back; sent again, the receiver
// drops the duplicate.
func TestOutboxDeliversWhenTheAgentIsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "store.db")
	st := openStore(t, path)
	sender := meshtest.Node(t, 130, node.WithStore(st))
	to := closedAgent(t, sender, 131)
	ctx := meshtest.Context(t, 30*time.Second)

	msg := protocol.AgentMessage{MessageID: "msg-away-1", Subject: "while you were out", Body: "hi"}
	_, err := sender.SendMessage(ctx, to, msg, time.Second)
	var qe *node.QueuedError
	if !errors.Is(err, node.ErrQueued) || !errors.As(err, &qe) || qe.MessageID != "msg-away-1" || qe.To != to {
		t.Fatalf("send to a closed node: %v, want a *QueuedError", err)
	}
	if qe.Expires.Before(time.Now().Add(node.DefaultMessageTTL - time.Minute)) {
		t.Errorf("expires %v, want about %v from now", qe.Expires, node.DefaultMessageTTL)
	}
	if n := queuedFor(t, st, to); n != 1 {
		t.Fatalf("outbox holds %d messages for the agent, want 1", n)
	}

	// The sender's node restarts: a new Node on the reopened store.
	if err := sender.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openStore(t, path)
	sender = meshtest.Node(t, 130, node.WithStore(st))
	if n := queuedFor(t, st, to); n != 1 {
		t.Fatalf("after the restart the outbox holds %d messages, want 1", n)
	}

	back := meshtest.Node(t, 131)
	got := newReceiver(back)
	meshtest.Connect(t, back, sender)
	wait.For(t, 10*time.Second, func() error {
		if c := got.count("msg-away-1"); c != 1 {
			return fmt.Errorf("processed %d times", c)
		}
		if n := queuedFor(t, st, to); n != 0 {
			return fmt.Errorf("outbox still holds %d", n)
		}
		return nil
	})
	// At least once on the wire, once at the receiver.
	if _, err := sender.SendMessage(ctx, to, msg, time.Second); err != nil {
		t.Fatal(err)
	}
	if c := got.count("msg-away-1"); c != 1 {
		t.Fatalf("processed %d times after a duplicate, want 1", c)
	}
}

// TestOutboxTTLThenDeadLetter: past the TTL a queued message is a dead
// letter under agent.messages.dlq; replayed, it goes out through the
// outbox once the agent is back.
func TestOutboxTTLThenDeadLetter(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "store.db"))
	sender := meshtest.Node(t, 132, node.WithStore(st), node.WithMessageTTL(300*time.Millisecond), node.WithOutboxRetry(50*time.Millisecond))
	to := closedAgent(t, sender, 133)
	ctx := meshtest.Context(t, 30*time.Second)
	if _, err := sender.SendMessage(ctx, to, protocol.AgentMessage{MessageID: "msg-ttl-1", Subject: "s"}, time.Second); !errors.Is(err, node.ErrQueued) {
		t.Fatalf("%v, want ErrQueued", err)
	}
	wait.For(t, 10*time.Second, func() error {
		dls, err := st.DeadLetters(ctx, store.DLQFilter{Topic: node.MessageDLQTopic})
		if err != nil || len(dls) != 1 || dls[0].ID != "msg-ttl-1" || dls[0].To != to {
			return fmt.Errorf("dead letters %+v %v", dls, err)
		}
		return nil
	})
	if n := queuedFor(t, st, to); n != 0 {
		t.Fatalf("a dead letter still in the outbox (%d)", n)
	}

	back := meshtest.Node(t, 133)
	got := newReceiver(back)
	meshtest.Connect(t, back, sender)
	if _, err := st.Replay(ctx, "msg-ttl-1"); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() error {
		if c := got.count("msg-ttl-1"); c != 1 {
			return fmt.Errorf("replayed message processed %d times", c)
		}
		return nil
	})
}

// TestOutboxWaitsForTheHandler: an agent that is up but takes no messages
// yet (its handler is not attached) is retried within the TTL, not
// dead-lettered.
func TestOutboxWaitsForTheHandler(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "store.db"))
	sender := meshtest.Node(t, 134, node.WithStore(st), node.WithOutboxRetry(50*time.Millisecond))
	bare := meshtest.Node(t, 135)
	meshtest.Connect(t, sender, bare)
	ctx := meshtest.Context(t, 30*time.Second)
	_, err := sender.SendMessage(ctx, bare.AgentID(), protocol.AgentMessage{MessageID: "msg-nohandler-1", Subject: "s", RequiresResponse: true}, time.Second)
	if !errors.Is(err, node.ErrQueued) || protocol.CodeOf(err) != protocol.CodeCapabilityNotSupported {
		t.Fatalf("%v, want ErrQueued caused by CAPABILITY_NOT_SUPPORTED", err)
	}
	got := newReceiver(bare)
	wait.For(t, 10*time.Second, func() error {
		if c := got.count("msg-nohandler-1"); c != 1 {
			return fmt.Errorf("processed %d times", c)
		}
		return nil
	})
	if dls, _ := st.DeadLetters(ctx, store.DLQFilter{}); len(dls) != 0 {
		t.Fatalf("dead letters %+v", dls)
	}
}

// TestOutboxBounds: past its per-agent bound the outbox refuses a message
// with ErrOutboxFull, and nothing is queued silently.
func TestOutboxBounds(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "store.db"))
	sender := meshtest.Node(t, 136, node.WithStore(st), node.WithOutboxBounds(2, 1<<20))
	to := closedAgent(t, sender, 137)
	ctx := meshtest.Context(t, 30*time.Second)
	for i := range 2 {
		if _, err := sender.SendMessage(ctx, to, protocol.AgentMessage{Subject: fmt.Sprint(i)}, time.Second); !errors.Is(err, node.ErrQueued) {
			t.Fatalf("message %d: %v, want ErrQueued", i, err)
		}
	}
	_, err := sender.SendMessage(ctx, to, protocol.AgentMessage{Subject: "one too many"}, time.Second)
	if !errors.Is(err, node.ErrOutboxFull) || errors.Is(err, node.ErrQueued) {
		t.Fatalf("third message: %v, want ErrOutboxFull", err)
	}
	if n := queuedFor(t, st, to); n != 2 {
		t.Fatalf("outbox holds %d, want 2", n)
	}
}
