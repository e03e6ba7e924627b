package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// mbBusRelay is the key index of the relay whose bus sends in these tests.
const mbBusRelay = 64

// runLog counts the runs of a capability's handler per request id.
type runLog struct {
	mu   sync.Mutex
	runs map[string]int // request id -> runs
	text []string
}

func (l *runLog) service(name string) node.Service {
	return node.Service{Capability: protocol.Capability{Name: name}, Handler: node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
		var p struct {
			Text string `json:"text"`
		}
		_ = json.Unmarshal(c.Request.Params, &p)
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.runs == nil {
			l.runs = map[string]int{}
		}
		l.runs[c.Request.CorrelationID]++
		l.text = append(l.text, p.Text)
		return json.RawMessage(`{"summary":"done"}`), nil
	})}
}

// got returns the texts handled, in order, and the runs per request id.
func (l *runLog) got() (string, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.text, ","), fmt.Sprint(l.runs)
}

// TestMailboxTakesBusMessageFromRelayThatWentDown: agent B names relay M
// as its mailbox, serves "summarize", and goes offline; a bus client on
// relay R sends to agent:<B> {"type":"summarize",…}: the ack says queued,
// R deposits the call at M and its outbox lets go of it; R goes down for
// good; B comes back, fetches from M and its handler runs the request
// exactly once.
func TestMailboxTakesBusMessageFromRelayThatWentDown(t *testing.T) {
	m, mst := mailboxRelay(t)
	rst := openStore(t, filepath.Join(t.TempDir(), "r.db"))
	r := meshtest.Node(t, mbBusRelay, node.WithStore(rst))
	b := agentWithMailboxGone(t, m, r)

	api := rpctest.Start(t, r, rpctest.WithBus(bus.WithTopics(r), bus.WithForwarder(r)))
	cl := rpctest.DialClient(t, api.URL, rpc.WithClientID("sender"))
	var res bus.SendResult
	if err := cl.Call(meshtest.Context(t, 20*time.Second), bus.MethodSendMessage,
		map[string]any{"topic": "agent:" + b.String(), "payload": map[string]any{"type": "summarize", "text": "while you were out"}}, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Success || len(res.Acks) != 1 || !res.Acks[0].Queued || res.Acks[0].Processed {
		t.Fatalf("send result %+v, want one queued ack", res)
	}
	// A deposit is sealed afresh at each attempt, so one whose answer was
	// lost (a loaded machine) and was retried leaves a second copy under
	// the same request id: at least once, as documented; the agent runs
	// it once all the same (checked below).
	if n := heldFor(t, mst, b); n < 1 {
		t.Fatalf("the mailbox holds %d, want the call", n)
	}
	if n := queuedFor(t, rst, b.String()); n != 0 {
		t.Fatalf("R's outbox still holds %d messages handed over", n)
	}
	if dls, err := rst.DeadLetters(context.Background(), store.DLQFilter{}); err != nil || len(dls) != 0 {
		t.Fatalf("R's dead letters %+v %v, want none for a message handed over", dls, err)
	}
	if err := api.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}

	var log runLog
	meshtest.Node(t, mbAgent, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "agent2.db"))),
		node.WithMailboxes(m.Addrs()[0]), node.WithServices(log.service("summarize")))
	want := fmt.Sprintf("map[%s:1]", res.MessageID)
	wait.For(t, 20*time.Second, func() error {
		if text, runs := log.got(); text != "while you were out" || runs != want {
			return fmt.Errorf("handled %q, runs %s; want the message once under %s", text, runs, res.MessageID)
		}
		if n := heldFor(t, mst, b); n != 0 {
			return fmt.Errorf("the mailbox still holds %d", n)
		}
		return nil
	})
	wait.Holds(t, 500*time.Millisecond, func() error {
		if text, runs := log.got(); text != "while you were out" || runs != want {
			return fmt.Errorf("handled %q, runs %s; want it once", text, runs)
		}
		return nil
	})
}

// TestMailboxCallAlsoSentDirectlyRunsOnce: a forwarded call that reaches
// its agent directly and again through its mailbox (a sender that
// deposited it and then delivered it itself, say after a crash before it
// forgot the entry) runs once: both carry the outbox entry's id as their
// request id, and the agent's task table knows it.
func TestMailboxCallAlsoSentDirectlyRunsOnce(t *testing.T) {
	m, mst := mailboxRelay(t)
	ast := openStore(t, filepath.Join(t.TempDir(), "sender.db"))
	a := meshtest.Node(t, mbSender, node.WithStore(ast))
	var log runLog
	b := meshtest.Node(t, mbAgent, node.WithMailboxes(m.Addrs()[0]), node.WithServices(log.service("summarize")),
		node.WithOutboxRetry(200*time.Millisecond))
	meshtest.Connect(t, a, b)
	ctx := meshtest.Context(t, 20*time.Second)
	params := json.RawMessage(`{"text":"twice sent","type":"summarize"}`)
	if _, err := a.Call(ctx, protocol.CallRequest{To: b.AgentID(), Action: "summarize", Params: params, CorrelationID: "bus-1"}); err != nil {
		t.Fatal(err)
	}
	// Forward deposits at once in the mailbox B names.
	if _, err := a.Forward(ctx, "bus-1", b.AgentID(), "summarize", params); err != nil {
		t.Fatal(err)
	}
	if n := queuedFor(t, ast, b.AgentID()); n != 0 {
		t.Fatalf("A's outbox holds %d, want the call handed over to the mailbox", n)
	}
	wait.For(t, 20*time.Second, func() error {
		if n := heldFor(t, mst, b.ID()); n != 0 {
			return fmt.Errorf("the mailbox still holds %d", n)
		}
		return nil
	})
	if text, runs := log.got(); text != "twice sent" || runs != "map[bus-1:1]" {
		t.Fatalf("handled %q, runs %s; want the call once", text, runs)
	}
}

// TestMailboxCallWaitsForItsHandler: a forwarded call fetched before the
// agent's program attached its handler stays in the mailbox, and runs
// once when the handler comes (the refusal for want of one is not what a
// later fetch gets); a call the agent's ACL refuses is dropped from the
// mailbox without running.
func TestMailboxCallWaitsForItsHandler(t *testing.T) {
	m, mst := mailboxRelay(t)
	a := meshtest.Node(t, mbSender, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "sender.db"))))
	b := agentWithMailboxGone(t, m, a)
	ctx := meshtest.Context(t, 20*time.Second)
	for _, c := range []struct{ id, action, text string }{{"call-1", "summarize", "later"}, {"call-2", "secret", "never"}} {
		if _, err := a.Forward(ctx, c.id, b.String(), c.action, json.RawMessage(`{"text":"`+c.text+`"}`)); err != nil {
			t.Fatal(err)
		}
	}
	if n := heldFor(t, mst, b); n != 2 {
		t.Fatalf("the mailbox holds %d, want both calls", n)
	}

	var log runLog
	secret := log.service("secret")
	secret.Capability.AuthorizedRequesterIDs = []string{meshtest.ID(t, mbRelay).String()}
	back := meshtest.Node(t, mbAgent, node.WithMailboxes(m.Addrs()[0]), node.WithServices(secret))
	wait.For(t, 20*time.Second, func() error {
		if n := heldFor(t, mst, b); n != 1 {
			return fmt.Errorf("the mailbox holds %d, want the call without a handler", n)
		}
		return nil
	})
	if text, runs := log.got(); text != "" {
		t.Fatalf("handled %q (runs %s) before the handler was attached, or despite the ACL", text, runs)
	}
	if err := back.SetServices([]node.Service{secret, log.service("summarize")}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, func() error {
		if text, runs := log.got(); text != "later" || runs != "map[call-1:1]" {
			return fmt.Errorf("handled %q, runs %s; want call-1 once", text, runs)
		}
		if n := heldFor(t, mst, b); n != 0 {
			return fmt.Errorf("the mailbox still holds %d", n)
		}
		return nil
	})
}

// TestMailboxOnTheSendingRelay: agent B names relay R itself as its
// mailbox; a bus message to agent:<B> sent on R while B is away goes into
// R's own mailbox service (no stream to itself) and leaves R's outbox; B
// comes back, fetches it from R and runs it once.
func TestMailboxOnTheSendingRelay(t *testing.T) {
	r, rst := mailboxRelay(t)
	b := agentWithMailboxGone(t, r, r)

	api := rpctest.Start(t, r, rpctest.WithBus(bus.WithTopics(r), bus.WithForwarder(r)))
	cl := rpctest.DialClient(t, api.URL, rpc.WithClientID("sender"))
	var res bus.SendResult
	if err := cl.Call(meshtest.Context(t, 20*time.Second), bus.MethodSendMessage,
		map[string]any{"topic": "agent:" + b.String(), "payload": map[string]any{"type": "summarize", "text": "on the relay"}}, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Acks) != 1 || !res.Acks[0].Queued {
		t.Fatalf("send result %+v, want one queued ack", res)
	}
	if n, held := queuedFor(t, rst, b.String()), heldFor(t, rst, b); n != 0 || held != 1 {
		t.Fatalf("R's outbox holds %d and its mailbox %d, want 0 and 1", n, held)
	}

	var log runLog
	meshtest.Node(t, mbAgent, node.WithMailboxes(r.Addrs()[0]), node.WithServices(log.service("summarize")))
	want := fmt.Sprintf("map[%s:1]", res.MessageID)
	wait.For(t, 20*time.Second, func() error {
		if text, runs := log.got(); text != "on the relay" || runs != want {
			return fmt.Errorf("handled %q, runs %s; want the message once", text, runs)
		}
		if n := heldFor(t, rst, b); n != 0 {
			return fmt.Errorf("the mailbox still holds %d", n)
		}
		return nil
	})
}
