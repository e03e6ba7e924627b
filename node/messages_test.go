package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

func TestDirectMessages(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	sender := meshtest.Node(t, 110, node.WithStore(st), node.WithMessageBackoff(10*time.Millisecond))
	receiver := meshtest.Node(t, 111)
	meshtest.Connect(t, sender, receiver)

	var processed atomic.Int64
	entered, release := make(chan struct{}, 4), make(chan struct{})
	var failOnce sync.Once
	receiver.OnMessage(func(_ context.Context, from peer.ID, m protocol.AgentMessage) (json.RawMessage, error) {
		processed.Add(1)
		switch m.Subject {
		case "slow":
			entered <- struct{}{}
			<-release
		case "flaky":
			var err error
			failOnce.Do(func() { err = errors.New("disk busy") })
			if err != nil {
				return nil, err
			}
		}
		return json.Marshal(map[string]string{"ack": m.MessageID, "from": from.String(), "body": m.Body})
	})
	ctx := meshtest.Context(t, 30*time.Second)

	t.Run("a response", func(t *testing.T) {
		processed.Store(0)
		res, err := sender.SendMessage(ctx, receiver.PublicKeyBase64(), protocol.AgentMessage{Subject: "Review request", Body: "src/auth.go", Priority: protocol.PriorityHigh, RequiresResponse: true}, 0)
		var got struct{ Ack, From, Body string }
		if err != nil || json.Unmarshal(res, &got) != nil || got.From != sender.AgentID() || got.Body != "src/auth.go" || got.Ack == "" {
			t.Fatalf("response %s %v", res, err)
		}
		if processed.Load() != 1 {
			t.Errorf("processed %d times", processed.Load())
		}
	})

	t.Run("a message delivered twice is processed once", func(t *testing.T) {
		processed.Store(0)
		m := protocol.AgentMessage{MessageID: "msg-dup-1", Subject: "slow", Body: "once"}
		params, _ := json.Marshal(m)
		results := make(chan string, 2)
		send := func() {
			resp, err := sender.Call(ctx, protocol.CallRequest{To: receiver.AgentID(), Action: protocol.MessageCapability, Params: params})
			if err != nil {
				results <- "error: " + err.Error()
				return
			}
			results <- string(resp.Result)
		}
		go send()
		<-entered // the first delivery is being processed
		go send() // the same message again, as a retry after a lost answer would be
		close(release)
		first, second := <-results, <-results
		if first != second || processed.Load() != 1 {
			t.Fatalf("answers %q and %q, processed %d times; want one processing and the same answer", first, second, processed.Load())
		}
		// Later duplicates get the remembered answer.
		res, err := sender.SendMessage(ctx, receiver.AgentID(), m, 0)
		if err != nil || string(res) != first || processed.Load() != 1 {
			t.Fatalf("late duplicate: %s %v, processed %d", res, err, processed.Load())
		}
	})

	t.Run("a failed attempt is retried", func(t *testing.T) {
		processed.Store(0)
		if _, err := sender.SendMessage(ctx, receiver.AgentID(), protocol.AgentMessage{Subject: "flaky", Body: "x"}, 0); err != nil {
			t.Fatal(err)
		}
		if processed.Load() != 2 {
			t.Errorf("processed %d times, want 2 (a failure, then the retry)", processed.Load())
		}
	})

	t.Run("invalid messages are refused, not retried", func(t *testing.T) {
		_, err := sender.SendMessage(ctx, receiver.AgentID(), protocol.AgentMessage{Subject: "x", Priority: "whenever"}, 0)
		if protocol.CodeOf(err) != protocol.CodeInvalidMessage {
			t.Fatalf("%v, want INVALID_MESSAGE", err)
		}
	})

	t.Run("after three failed attempts, the dead-letter queue", func(t *testing.T) {
		failing := meshtest.Node(t, 112)
		failing.OnMessage(func(context.Context, peer.ID, protocol.AgentMessage) (json.RawMessage, error) {
			return nil, errors.New("disk full")
		})
		meshtest.Connect(t, sender, failing)
		_, err := sender.SendMessage(ctx, failing.AgentID(), protocol.AgentMessage{MessageID: "msg-lost-1", Subject: "hello?", Body: "anyone"}, 500*time.Millisecond)
		if !errors.Is(err, node.ErrDeadLettered) {
			t.Fatalf("%v, want ErrDeadLettered", err)
		}
		dls, err := st.DeadLetters(ctx, store.DLQFilter{Topic: node.MessageDLQTopic})
		if err != nil || len(dls) != 1 || dls[0].ID != "msg-lost-1" || dls[0].To != failing.AgentID() || dls[0].Attempts != node.MessageAttempts {
			t.Fatalf("dead letters %+v %v", dls, err)
		}
	})
}
