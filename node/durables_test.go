package node_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// TestNodeDurables: the node lists the durable names its store keeps,
// sorted, with their positions' sizes, which runs now and the store's
// bound; a node without a store refuses with INVALID_MESSAGE, as
// ForgetDurable does.
func TestNodeDurables(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "node.db"))
	n := meshtest.Node(t, 150, node.WithStore(st))
	ctx := meshtest.Context(t, 20*time.Second)
	nop := func(context.Context, protocol.TopicMessage) error { return nil }
	cancelB, err := n.SubscribeDurable(ctx, "news:*", "b", nop)
	if err != nil {
		t.Fatal(err)
	}
	defer cancelB()
	cancelA, err := n.SubscribeDurable(ctx, "news:*", "a", nop)
	if err != nil {
		t.Fatal(err)
	}
	cancelA()
	list, err := n.Durables(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list.Limit != st.MaxDurables() || len(list.Durables) != 2 {
		t.Fatalf("Durables = %+v, want a and b, limit %d", list, st.MaxDurables())
	}
	a, b := list.Durables[0], list.Durables[1]
	if a.Name != "a" || a.Active || a.Bytes == 0 || b.Name != "b" || !b.Active || b.Bytes == 0 {
		t.Fatalf("Durables = %+v, want a (not running) then b (running), each with its size", list.Durables)
	}

	bare := meshtest.Node(t, 151)
	_, err = bare.Durables(ctx)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidMessage {
		t.Fatalf("Durables without a store: %v, want INVALID_MESSAGE", err)
	}
}
