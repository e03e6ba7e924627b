package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/internal/wstest"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// durableMesh is topicMesh with durable subscriptions modelled as the
// node runs them: a log of every message published on "news:*" (add),
// and per name the index of the first message its handler has not taken.
// A subscription delivers from there, one message at a time after
// SubscribeDurable returned, advances when the handler returns nil, and
// stops at an error. The name "taken" is refused, "nokeeper" finds no
// keeper.
type durableMesh struct {
	*topicMesh
	mu    sync.Mutex
	log   []protocol.TopicMessage
	next  map[string]int
	inUse map[string]bool
	added chan struct{} // closed and replaced by add
	// halted holds, per name, the handler's error that stopped it.
	halted map[string]error
	// gate, when set, holds SubscribeDurable of the name "gated" (its
	// first fetch) until it is closed; entered is closed once it waits.
	gate, entered chan struct{}
}

// durableServer serves mesh's topics and durable subscriptions.
func durableServer(t *testing.T, mesh *durableMesh, opts ...rpc.Option) *testServer {
	t.Helper()
	return serveMesh(t, mesh, mesh.Mesh, append([]rpc.Option{rpc.WithTopics(mesh), rpc.WithDurables(mesh)}, opts...)...)
}

func newDurableMesh() *durableMesh {
	return &durableMesh{topicMesh: newTopicMesh(), next: map[string]int{}, inUse: map[string]bool{}, added: make(chan struct{}), halted: map[string]error{}}
}

// add appends messages {"n":from} to {"n":to-1} to the log.
func (m *durableMesh) add(from, to int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for n := from; n < to; n++ {
		m.log = append(m.log, protocol.TopicMessage{Topic: "news:1", From: "publisher", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), Time: time.Unix(1700000000, 0).UTC(), ID: fmt.Sprint(n)})
	}
	close(m.added)
	m.added = make(chan struct{})
}

func (m *durableMesh) SubscribeDurable(_ context.Context, _, name string, handler func(context.Context, protocol.TopicMessage) error) (func(), error) {
	if name == "gated" && m.gate != nil {
		close(m.entered)
		<-m.gate
	}
	switch name {
	case "taken":
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "durable %q is in use on this node", name)
	case "nokeeper":
		return nil, fmt.Errorf("%w: no history keeper answered", protocol.ErrNoPeers)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inUse[name] {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "durable %q is in use on this node", name)
	}
	m.inUse[name] = true
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m.mu.Lock()
			i, added := m.next[name], m.added
			if i == len(m.log) {
				m.mu.Unlock()
				select {
				case <-added:
					continue
				case <-ctx.Done():
					return
				}
			}
			msg := m.log[i]
			m.mu.Unlock()
			if err := handler(ctx, msg); err != nil {
				m.mu.Lock()
				m.halted[name] = err
				m.mu.Unlock()
				return
			}
			m.mu.Lock()
			m.next[name] = i + 1
			m.mu.Unlock()
		}
	}()
	return func() {
		cancel()
		<-done
		m.mu.Lock()
		delete(m.inUse, name)
		m.mu.Unlock()
	}, nil
}

// durableReader records what a client's durable handler took.
type durableReader struct {
	mu  sync.Mutex
	got []int
}

func (r *durableReader) take(m protocol.TopicMessage) int {
	var p struct{ N int }
	_ = json.Unmarshal(m.Payload, &p)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, p.N)
	return p.N
}

func (r *durableReader) numbers() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func (r *durableReader) waitFor(t *testing.T, want []int) {
	t.Helper()
	wait.For(t, testTimeout, func() error {
		if got := r.numbers(); !slices.Equal(got, want) {
			return fmt.Errorf("took %v, want %v", got, want)
		}
		return nil
	})
}

// TestDurableSubscribe: a catch-up far longer than the send queue
// reaches a Go client whole and in order, each message a request the
// client answers, without the client being cut off as a slow consumer,
// then live messages follow.
func TestDurableSubscribe(t *testing.T) {
	l := rpc.DefaultLimits()
	l.SendQueue = 4
	mesh := newDurableMesh()
	mesh.add(0, 600)
	url := durableServer(t, mesh, rpc.WithLimits(l)).url
	c := dialClient(t, url)
	r := &durableReader{}
	if _, err := c.SubscribeDurable(ctxT(t), "news:*", "reader", func(m protocol.TopicMessage) error {
		r.take(m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	mesh.add(600, 601)
	want := make([]int, 601)
	for i := range want {
		want[i] = i
	}
	r.waitFor(t, want)

	for name, code := range map[string]int{"taken": rpc.CodeInvalidParams, "nokeeper": rpc.CodeNoPeers} {
		_, err := c.SubscribeDurable(ctxT(t), "news:*", name, func(protocol.TopicMessage) error { return nil })
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != code {
			t.Errorf("durable %q: %v, want code %d", name, err, code)
		}
	}
}

// TestDurableAnswered: a message counts as delivered only once the
// client answers it. A client that disconnects with message 3
// unanswered gets 3 again on its next subscription of the name, then
// the rest in order; what it answered never comes twice. An error answer
// stops the subscription; subscribed again, the refused message comes
// first.
func TestDurableAnswered(t *testing.T) {
	mesh := newDurableMesh()
	mesh.add(0, 5)
	ts := durableServer(t, mesh)
	answered := &durableReader{}

	// The first client answers 0, 1 and 2, and goes away while it holds 3.
	a := dialClient(t, ts.url)
	holding, release := make(chan struct{}), make(chan struct{})
	if _, err := a.SubscribeDurable(ctxT(t), "news:*", "reader", func(m protocol.TopicMessage) error {
		if m.ID == "3" {
			close(holding)
			<-release
			return nil // too late: the connection is gone
		}
		answered.take(m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, testTimeout, func() error {
		select {
		case <-holding:
			return nil
		default:
			return fmt.Errorf("message 3 not received yet; took %v", answered.numbers())
		}
	})
	closed := make(chan struct{})
	go func() { defer close(closed); _ = a.Close() }()
	waitFor(t, "the first client to go", func() bool { return ts.srv.Clients() == 0 })
	close(release)
	<-closed
	answered.waitFor(t, []int{0, 1, 2})

	// The second client starts at 3; it refuses 5, after which nothing
	// more comes, however much is published.
	b := dialClient(t, ts.url)
	refuse := protocol.Errorf(protocol.CodeInternalError, "cannot take 5 now")
	id, err := b.SubscribeDurable(ctxT(t), "news:*", "reader", func(m protocol.TopicMessage) error {
		if m.ID == "5" {
			return refuse
		}
		answered.take(m)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	mesh.add(5, 8)
	answered.waitFor(t, []int{0, 1, 2, 3, 4})
	wait.Holds(t, 300*time.Millisecond, func() error {
		if got := answered.numbers(); len(got) != 5 {
			return fmt.Errorf("took %v after refusing 5", got)
		}
		return nil
	})
	if err := b.Unsubscribe(ctxT(t), id); err != nil {
		t.Fatal(err)
	}
	if _, err := b.SubscribeDurable(ctxT(t), "news:*", "reader", func(m protocol.TopicMessage) error {
		answered.take(m)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	answered.waitFor(t, []int{0, 1, 2, 3, 4, 5, 6, 7})
}

// haltedBy returns the error that stopped name's handler, or nil.
func (m *durableMesh) haltedBy(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.halted[name]
}

// TestDurableAnswerStrict: the client's answer to a durable mesh.message
// is decoded strictly. An answer for an id never sent, or a second
// answer to one already answered, is ignored and the subscription goes
// on; an answer of the right id but the wrong shape (an error that is
// not an object with an integer code and a string message, both result
// and error, no "jsonrpc") stops the subscription with a clear error
// instead of leaving it waiting for an answer that never comes.
func TestDurableAnswerStrict(t *testing.T) {
	bad := []string{
		`{"jsonrpc":"2.0","id":%s,"error":"boom"}`,
		`{"jsonrpc":"2.0","id":%s,"error":{"code":"x","message":"m"}}`,
		`{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":5}}`,
		`{"jsonrpc":"2.0","id":%s,"error":{"code":1.5,"message":"m"}}`,
		`{"jsonrpc":"2.0","id":%s,"result":{},"error":{"code":1,"message":"m"}}`,
		`{"id":%s,"result":{}}`,
	}
	for i, answer := range bad {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			mesh := newDurableMesh()
			mesh.add(0, 3)
			ts := durableServer(t, mesh)
			c := wstest.Dial(t, ts.url)
			c.Write([]byte(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"clientId":"raw","clientInfo":{"name":"raw"}}}`))
			if b := c.Next(); !strings.Contains(string(b), `"result"`) {
				t.Fatalf("initialize: %s", b)
			}
			c.Write([]byte(`{"jsonrpc":"2.0","id":"sub","method":"mesh.subscribe","params":{"pattern":"news:*","durable":"reader"}}`))
			// next reads until the server's next mesh.message request.
			next := func() (id string, n string) {
				t.Helper()
				for {
					var m struct {
						ID     json.RawMessage
						Method string
						Params struct{ Message protocol.TopicMessage }
					}
					if err := json.Unmarshal(c.Next(), &m); err != nil {
						t.Fatal(err)
					}
					if m.Method == rpc.MethodMeshMessage {
						return string(m.ID), m.Params.Message.ID
					}
				}
			}
			id, n := next()
			if n != "0" {
				t.Fatalf("first message %s", n)
			}
			c.Write([]byte(`{"jsonrpc":"2.0","id":"never-sent","result":{}}`))
			c.Write([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{}}`, id)))
			c.Write([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"error":{"code":-32000,"message":"twice"}}`, id)))
			id, n = next()
			if n != "1" {
				t.Fatalf("after an answer, a stray and a repeat: message %s, want 1", n)
			}
			c.Write([]byte(fmt.Sprintf(answer, id)))
			wait.For(t, testTimeout, func() error {
				var re *rpc.Error
				if err := mesh.haltedBy("reader"); !errors.As(err, &re) || re.Code != rpc.CodeInvalidRequest {
					return fmt.Errorf("subscription not stopped by the bad answer: %v", err)
				}
				return nil
			})
			if err := mesh.haltedBy("reader"); !strings.Contains(err.Error(), "invalid response") {
				t.Errorf("error %q does not say the answer was invalid", err)
			}
			mesh.mu.Lock()
			defer mesh.mu.Unlock()
			if mesh.next["reader"] != 1 {
				t.Errorf("position %d, want 1 (message 1 not processed)", mesh.next["reader"])
			}
		})
	}
}

// TestDurableUnsubscribedWhileCatchingUp: a durable subscription whose id
// mesh.unsubscribe took while its first fetch ran ends when the fetch
// does, and mesh.subscribe says so, instead of living on unknown to the
// client and holding its name on the node.
func TestDurableUnsubscribedWhileCatchingUp(t *testing.T) {
	mesh := newDurableMesh()
	mesh.gate, mesh.entered = make(chan struct{}), make(chan struct{})
	ts := durableServer(t, mesh)
	var open sync.Once
	release := func() { open.Do(func() { close(mesh.gate) }) }
	t.Cleanup(release)
	c := wstest.Dial(t, ts.url)
	c.Write([]byte(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"clientId":"raw","clientInfo":{"name":"raw"}}}`))
	if b := c.Next(); !strings.Contains(string(b), `"result"`) {
		t.Fatalf("initialize: %s", b)
	}
	c.Write([]byte(`{"jsonrpc":"2.0","id":"sub","method":"mesh.subscribe","params":{"pattern":"news:*","durable":"gated"}}`))
	select {
	case <-mesh.entered:
	case <-time.After(testTimeout):
		t.Fatal("mesh.subscribe did not reach the mesh")
	}
	c.Write([]byte(`{"jsonrpc":"2.0","id":"unsub","method":"mesh.unsubscribe","params":{"subscription":"s1"}}`))
	if b := c.Next(); !strings.Contains(string(b), `"id":"unsub","result":true`) {
		t.Fatalf("unsubscribe while catching up: %s", b)
	}
	release()
	if b := c.Next(); !strings.Contains(string(b), `"id":"sub","error"`) || !strings.Contains(string(b), "unsubscribed before it started") {
		t.Fatalf("subscribe unsubscribed while catching up: %s", b)
	}
	mesh.mu.Lock()
	defer mesh.mu.Unlock()
	if mesh.inUse["gated"] {
		t.Fatal("the subscription lives on, holding its name")
	}
}
