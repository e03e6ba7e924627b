package cli

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// TestDurableNamesBoundedOverAPI: a local API client that makes durable
// subscription names without end meets the node's bound as a JSON-RPC
// error (-32602, as every refused durable name), not a disk that fills;
// mesh.forgetDurable drops a name it no longer needs and makes room.
func TestDurableNamesBoundedOverAPI(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "node.db"), store.WithPruneInterval(0), store.WithLogger(testlog.New(t)), store.WithMaxDurables(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	n := meshtest.Node(t, 44, node.WithStore(st))
	ctx := meshtest.Context(t, 20*time.Second)
	c, err := rpc.Dial(ctx, serveAPI(t, n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	nop := func(protocol.TopicMessage) error { return nil }
	first, err := c.SubscribeDurable(ctx, "news:*", "first", nop)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscribeDurable(ctx, "news:*", "second", nop); err != nil {
		t.Fatal(err)
	}
	_, err = c.SubscribeDurable(ctx, "news:*", "third", nop)
	var re *rpc.Error
	if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, "forget one first") {
		t.Fatalf("a third name: %v, want -32602 saying to forget one", err)
	}
	if _, err := c.ForgetDurable(ctx, "first"); !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, "in use") {
		t.Fatalf("forgetting a name in use: %v, want -32602", err)
	}
	if err := c.Unsubscribe(ctx, first); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.ForgetDurable(ctx, "first"); err != nil || !ok {
		t.Fatalf("forget: %v %v, want true", ok, err)
	}
	if ok, err := c.ForgetDurable(ctx, "never"); err != nil || ok {
		t.Fatalf("forget a name never kept: %v %v, want false", ok, err)
	}
	if _, err := c.SubscribeDurable(ctx, "news:*", "third", nop); err != nil {
		t.Fatalf("a new name after a forget: %v", err)
	}
}
