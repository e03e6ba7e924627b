package rpc_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// durableMesh is topicMesh with durable subscriptions: the name "taken"
// is refused, "nokeeper" finds no keeper, any other name catches up on
// catchUp messages before it returns, then goes on live.
type durableMesh struct {
	*topicMesh
	catchUp int
}

func (m *durableMesh) SubscribeDurable(_ context.Context, pattern, name string, handler func(protocol.TopicMessage)) (func(), error) {
	switch name {
	case "taken":
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "durable %q is in use on this node", name)
	case "nokeeper":
		return nil, fmt.Errorf("%w: no history keeper answered", protocol.ErrNoPeers)
	}
	for i := range m.catchUp {
		handler(protocol.TopicMessage{Topic: "news:1", From: "publisher", Payload: json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)), Time: time.Unix(1700000000, 0).UTC(), ID: fmt.Sprint(i)})
	}
	return m.Subscribe(pattern, handler)
}

// TestDurableSubscribe: a catch-up far longer than the send queue
// reaches a Go client whole and in order before its answer, without the
// client being cut off as a slow consumer, then live messages follow.
func TestDurableSubscribe(t *testing.T) {
	l := rpc.DefaultLimits()
	l.SendQueue = 4
	mesh := &durableMesh{topicMesh: newTopicMesh(), catchUp: 600}
	url := serveMesh(t, mesh, mesh.Mesh, rpc.WithLimits(l)).url
	c := dialClient(t, url)
	var got []int
	done := make(chan struct{})
	handler := func(m protocol.TopicMessage) {
		var p struct{ N int }
		_ = json.Unmarshal(m.Payload, &p)
		got = append(got, p.N)
		if len(got) == 601 {
			close(done)
		}
	}
	if _, err := c.SubscribeDurable(ctxT(t), "news:*", "reader", handler); err != nil {
		t.Fatal(err)
	}
	pub := dialClient(t, url)
	if _, err := pub.Publish(ctxT(t), "news:2", json.RawMessage(`{"n":600}`), nil, 0); err != nil {
		t.Fatal(err)
	}
	wait.For(t, testTimeout, func() error {
		select {
		case <-done:
			return nil
		default:
			return errors.New("not all 601 messages yet")
		}
	})
	for i, n := range got {
		if n != i {
			t.Fatalf("message %d is %d: out of order or lost", i, n)
		}
	}

	for name, code := range map[string]int{"taken": rpc.CodeInvalidParams, "nokeeper": rpc.CodeNoPeers} {
		_, err := c.SubscribeDurable(ctxT(t), "news:*", name, func(protocol.TopicMessage) {})
		var re *rpc.Error
		if !errors.As(err, &re) || re.Code != code {
			t.Errorf("durable %q: %v, want code %d", name, err, code)
		}
	}
}
