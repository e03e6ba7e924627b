package node_test

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/p2ptest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/mailbox"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// TestMailboxRequestRunsOnceAcrossRestart is issue 23's defect 2: a
// mailbox that serves again an item the agent already ran and
// acknowledged (a hostile or confused relay) must not make the agent run
// it again after a restart. The agent remembers it on disk by (signer,
// request id): the second agent node, on the same store, takes the item
// from the mailbox without running it. On the code that remembered only
// in memory, the handler ran twice.
func TestMailboxRequestRunsOnceAcrossRestart(t *testing.T) {
	r, mst := mailboxRelay(t)
	// The relay holds mail only for an agent that named it.
	registerAgent(t, r, mst, mbAgent)
	b := meshtest.ID(t, mbAgent)
	h := p2ptest.Host(t)
	h.Peerstore().AddAddrs(r.ID(), r.Addrs(), time.Hour)
	s, err := sign.NewSigner(h.Peerstore().PrivKey(h.ID()))
	if err != nil {
		t.Fatal(err)
	}
	env := sealRequest(t, s, b, &protocol.Request{Action: "summarize", CorrelationID: "once-1", Params: []byte(`{"text":"run me once"}`)})
	c := &mailbox.Client{Host: h}
	deposit := func() {
		t.Helper()
		if err := c.Deposit(meshtest.Context(t, 10*time.Second), r.ID(), b, env); err != nil {
			t.Fatal(err)
		}
	}
	dbPath := filepath.Join(t.TempDir(), "agent.db")
	var log runLog
	deposit()
	st := openStore(t, dbPath)
	agent := meshtest.Node(t, mbAgent, node.WithStore(st), node.WithMailboxes(r.Addrs()[0]), node.WithServices(log.service("summarize")))
	wait.For(t, 20*time.Second, func() error {
		if _, runs := log.got(); runs != "map[once-1:1]" {
			return fmt.Errorf("runs %s", runs)
		}
		if n := heldFor(t, mst, b); n != 0 {
			return fmt.Errorf("the mailbox still holds %d", n)
		}
		return nil
	})
	if err := agent.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	// The relay serves the same envelope again; the agent restarts.
	deposit()
	st = openStore(t, dbPath)
	meshtest.Node(t, mbAgent, node.WithStore(st), node.WithMailboxes(r.Addrs()[0]), node.WithServices(log.service("summarize")))
	wait.For(t, 20*time.Second, func() error {
		if n := heldFor(t, mst, b); n != 0 {
			return fmt.Errorf("the mailbox still holds %d", n)
		}
		return nil
	})
	if _, runs := log.got(); runs != "map[once-1:1]" {
		t.Fatalf("runs %s: the request ran again after the restart", runs)
	}
}

// TestMailboxRequestsPastTaskShareRun: a requester at its share of
// recorded tasks (WithTaskBounds) still gets its new mailbox requests
// run: the agent forgets that requester's oldest finished record, and
// keeps the newest. The mailbox power-loss chaos scenario found a sender's
// 1,025th note left in the mailbox for the TTL, refused RATE_LIMITED at
// every fetch.
func TestMailboxRequestsPastTaskShareRun(t *testing.T) {
	r, mst := mailboxRelay(t)
	// The relay holds mail only for an agent that named it.
	registerAgent(t, r, mst, mbAgent)
	b := meshtest.ID(t, mbAgent)
	h := p2ptest.Host(t)
	h.Peerstore().AddAddrs(r.ID(), r.Addrs(), time.Hour)
	s, err := sign.NewSigner(h.Peerstore().PrivKey(h.ID()))
	if err != nil {
		t.Fatal(err)
	}
	c := &mailbox.Client{Host: h}
	envs := map[string][]byte{}
	deposit := func(id string) {
		t.Helper()
		env, ok := envs[id]
		if !ok {
			env = sealRequest(t, s, b, &protocol.Request{Action: "summarize", CorrelationID: id, Params: []byte(`{"text":"x"}`)})
			envs[id] = env
		}
		if err := c.Deposit(meshtest.Context(t, 10*time.Second), r.ID(), b, env); err != nil {
			t.Fatal(err)
		}
	}
	deposit("b-1")
	deposit("b-2")
	var log runLog
	// Fetches every 100 ms: the item served again is read soon.
	meshtest.Node(t, mbAgent, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "agent.db"))), node.WithMailboxes(r.Addrs()[0]),
		node.WithServices(log.service("summarize")), node.WithTaskBounds(store.TaskBounds{PerRequester: 1}), node.WithOutboxRetry(100*time.Millisecond))
	emptied := func(want string) func() error {
		return func() error {
			if _, runs := log.got(); runs != want {
				return fmt.Errorf("runs %s, want %s", runs, want)
			}
			if n := heldFor(t, mst, b); n != 0 {
				return fmt.Errorf("the mailbox holds %d, want none", n)
			}
			return nil
		}
	}
	wait.For(t, 20*time.Second, emptied("map[b-1:1 b-2:1]"))
	// The newest is what the agent remembers: served again, it does not
	// run again.
	deposit("b-2")
	wait.For(t, 20*time.Second, emptied("map[b-1:1 b-2:1]"))
}

// TestMailboxRequestNotRunAgainWhenSentDirectly: a request the agent ran
// from its mailbox, sent to it again directly after it restarted (a
// sender whose deposit's answer was lost keeps the message in its outbox
// and delivers it itself once it sees the agent) is answered from the
// agent's record, not run again. The mailbox power-loss chaos scenario
// ran such a message twice.
func TestMailboxRequestNotRunAgainWhenSentDirectly(t *testing.T) {
	r, mst := mailboxRelay(t)
	registerAgent(t, r, mst, mbAgent)
	b := meshtest.ID(t, mbAgent)
	sender := meshtest.Node(t, mbSender)
	sender.Host().Peerstore().AddAddrs(r.ID(), r.Addrs(), time.Hour)
	s, err := sign.NewSigner(meshtest.Key(t, mbSender))
	if err != nil {
		t.Fatal(err)
	}
	req := &protocol.Request{Action: "summarize", CorrelationID: "once-2", Params: []byte(`{"text":"run me once"}`)}
	c := &mailbox.Client{Host: sender.Host()}
	if err := c.Deposit(meshtest.Context(t, 10*time.Second), r.ID(), b, sealRequest(t, s, b, req)); err != nil {
		t.Fatal(err)
	}
	dbPath := filepath.Join(t.TempDir(), "agent.db")
	var log runLog
	st := openStore(t, dbPath)
	agent := meshtest.Node(t, mbAgent, node.WithStore(st), node.WithMailboxes(r.Addrs()[0]), node.WithServices(log.service("summarize")))
	wait.For(t, 20*time.Second, func() error {
		if _, runs := log.got(); runs != "map[once-2:1]" {
			return fmt.Errorf("runs %s", runs)
		}
		if n := heldFor(t, mst, b); n != 0 {
			return fmt.Errorf("the mailbox still holds %d", n)
		}
		return nil
	})
	if err := agent.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	agent = meshtest.Node(t, mbAgent, node.WithStore(openStore(t, dbPath)), node.WithServices(log.service("summarize")))
	meshtest.Connect(t, sender, agent)
	resp, err := sender.Call(meshtest.Context(t, 20*time.Second), protocol.CallRequest{To: b.String(), Action: req.Action, Params: req.Params, CorrelationID: req.CorrelationID})
	if err != nil {
		t.Fatalf("the direct repeat: %v, want the recorded answer", err)
	}
	if _, runs := log.got(); runs != "map[once-2:1]" {
		t.Fatalf("runs %s: the request ran again when sent directly after the restart (answer %s)", runs, resp.Result)
	}
}
