package cli

import (
	"encoding/json"
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

// TestDurableCommand: an operator whose node refuses a new durable name
// sees what fills the bound with `durable list` (names sorted, which runs
// now, the limit), frees one with `durable forget NAME`, and the new name
// is then accepted; forgetting a name in use or one never kept fails.
func TestDurableCommand(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "node.db"), store.WithPruneInterval(0), store.WithLogger(testlog.New(t)), store.WithMaxDurables(2))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	n := meshtest.Node(t, 45, node.WithStore(st))
	ctx := meshtest.Context(t, 20*time.Second)
	api := serveAPI(t, n)
	c, err := rpc.Dial(ctx, api)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	nop := func(protocol.TopicMessage) error { return nil }

	if out := runCLI(t, "", "durable", "list", "--api", api); out.code != 0 || strings.TrimSpace(out.stdout) != "0 durable names kept of 2" {
		t.Fatalf("list of none: %d %q %s", out.code, out.stdout, out.stderr)
	}
	zed, err := c.SubscribeDurable(ctx, "news:*", "zed", nop)
	if err != nil {
		t.Fatal(err)
	}
	ann, err := c.SubscribeDurable(ctx, "news:*", "ann", nop)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Unsubscribe(ctx, ann); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SubscribeDurable(ctx, "news:*", "new", nop); err == nil {
		t.Fatal("a third name accepted past the bound of 2")
	}

	out := runCLI(t, "", "durable", "list", "--api", api)
	out.wantCode(t, 0)
	lines := strings.Split(strings.TrimSpace(out.stdout), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "NAME BYTES ACTIVE" ||
		!strings.HasPrefix(lines[1], "ann ") || !strings.HasSuffix(lines[1], " no") ||
		!strings.HasPrefix(lines[2], "zed ") || !strings.HasSuffix(lines[2], " yes") || lines[3] != "2 durable names kept of 2" {
		t.Fatalf("durable list:\n%s", out.stdout)
	}
	out = runCLI(t, "", "durable", "list", "--json", "--api", api)
	out.wantCode(t, 0)
	var list protocol.DurableList
	if err := json.Unmarshal([]byte(out.stdout), &list); err != nil {
		t.Fatalf("durable list --json %q: %v", out.stdout, err)
	}
	if list.Limit != 2 || len(list.Durables) != 2 || list.Durables[0].Name != "ann" || list.Durables[0].Active ||
		list.Durables[0].Bytes == 0 || list.Durables[1].Name != "zed" || !list.Durables[1].Active {
		t.Fatalf("durable list --json: %+v", list)
	}

	out = runCLI(t, "", "durable", "forget", "zed", "--api", api)
	if out.code != ExitUsage || !strings.Contains(out.stderr, "in use") {
		t.Fatalf("forget a name in use: %d %s", out.code, out.stderr)
	}
	out = runCLI(t, "", "durable", "forget", "never", "--api", api)
	if out.code != ExitUsage || !strings.Contains(out.stderr, `keeps no position for "never"`) {
		t.Fatalf("forget a name never kept: %d %s", out.code, out.stderr)
	}
	out = runCLI(t, "", "durable", "forget", "ann", "--api", api)
	out.wantCode(t, 0)
	if !strings.Contains(out.stdout, "forgot durable ann") {
		t.Fatalf("forget: %q", out.stdout)
	}
	if _, err := c.SubscribeDurable(ctx, "news:*", "new", nop); err != nil {
		t.Fatalf("a new name after durable forget: %v", err)
	}
	if err := c.Unsubscribe(ctx, zed); err != nil {
		t.Fatal(err)
	}
	out = runCLI(t, "", "durable", "forget", "zed", "--json", "--api", api)
	out.wantCode(t, 0)
	if strings.TrimSpace(out.stdout) != `{"durable":"zed","forgotten":true}` {
		t.Fatalf("forget --json: %q", out.stdout)
	}
	for _, args := range [][]string{{"durable"}, {"durable", "forget"}, {"durable", "drop", "x"}, {"durable", "list", "x"}} {
		if out := runCLI(t, "", append(args, "--api", api)...); out.code != ExitUsage {
			t.Errorf("%v: exit %d, want %d", args, out.code, ExitUsage)
		}
	}
}
