//go:build linux

package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/smallfs"
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// TestMeshSendMessageDiskFullRefused (issue 23, disk full on a node):
// mesh.sendMessage on the local API to an agent that is away, from a node
// whose data directory is on a full filesystem, is refused with -32005
// naming the cause (no space left on device), in both of its shapes
// ({"agentId","message"} and seed 004's agent_message), never answered
// queued; once space returns it is queued again, and every message
// answered queued reaches the agent when it is back.
func TestMeshSendMessageDiskFullRefused(t *testing.T) {
	dir := smallfs.Mount(t, "8m")
	st, err := store.Open(filepath.Join(dir, StoreFileName), store.WithPruneInterval(0), store.WithLogger(testlog.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	n := meshtest.Node(t, 74, node.WithStore(st))
	api := startTest(t, WithNode(n)).APIAddr()
	away := meshtest.Node(t, 75)
	meshtest.Connect(t, n, away)
	to := away.AgentID()
	if err := away.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := meshtest.Context(t, 2*time.Minute)
	cl, err := rpc.Dial(ctx, api)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	body := strings.Repeat("x", 32<<10)
	shapes := []struct {
		name   string
		params func(id string) map[string]any
		queued func(raw json.RawMessage) bool
	}{
		{"agentId and message", func(id string) map[string]any {
			return map[string]any{"agentId": to, "message": map[string]any{"message_id": id, "subject": "s", "body": body}}
		}, func(raw json.RawMessage) bool {
			var r struct {
				Queued bool `json:"queued"`
			}
			return json.Unmarshal(raw, &r) == nil && r.Queued
		}},
		{"seed 004 agent_message", func(id string) map[string]any {
			return map[string]any{"type": "agent_message", "to_agent_id": to, "message_id": id, "subject": "s", "body": body}
		}, func(raw json.RawMessage) bool {
			var r struct {
				Status string `json:"status"`
			}
			return json.Unmarshal(raw, &r) == nil && r.Status == "queued"
		}},
	}
	var acked []string
	// send reports whether id was queued; a refusal must be -32005 saying
	// why, never a result.
	send := func(shape int, id string) (bool, error) {
		var raw json.RawMessage
		err := cl.Call(ctx, rpc.MethodMeshSendMessage, shapes[shape].params(id), &raw)
		if err == nil {
			if !shapes[shape].queued(raw) {
				t.Fatalf("mesh.sendMessage (%s) %s answered %s, want queued", shapes[shape].name, id, raw)
			}
			acked = append(acked, id)
			return true, nil
		}
		return false, err
	}
	for i := range shapes {
		if ok, err := send(i, fmt.Sprintf("before-%d", i)); !ok {
			t.Fatalf("mesh.sendMessage (%s) before the disk filled: %v", shapes[i].name, err)
		}
	}

	filler := filepath.Join(dir, "filler")
	smallfs.Fill(t, filler)
	refused := make([]int, len(shapes))
	for i := range 40 {
		shape := i % len(shapes)
		ok, err := send(shape, fmt.Sprintf("full-%d", i))
		if ok {
			continue
		}
		refused[shape]++
		if rpcCode(err) != rpc.CodeServerBusy || !strings.Contains(err.Error(), "no space left on device") || !strings.Contains(err.Error(), "not accepted") {
			t.Fatalf("mesh.sendMessage (%s) on a full disk: %v (code %d); want -32005 saying why", shapes[shape].name, err, rpcCode(err))
		}
		if strings.Contains(err.Error(), "\n") {
			t.Fatalf("the refusal spans lines: %q", err)
		}
		// The outbox's write error first, then why the message was not delivered.
		if w, a := strings.Index(err.Error(), "node: outbox: "), strings.Index(err.Error(), " (not delivered: "); w < 0 || a < w {
			t.Fatalf("the refusal does not name the outbox's write, then why the message was not delivered: %q", err)
		}
	}
	for i, r := range refused {
		if r == 0 {
			t.Fatalf("mesh.sendMessage (%s): every message was queued on a full disk", shapes[i].name)
		}
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	for i := range shapes {
		id := fmt.Sprintf("after-%d", i)
		wait.For(t, 30*time.Second, func() error {
			if ok, err := send(i, id); !ok {
				return fmt.Errorf("mesh.sendMessage (%s) after space returned: %w", shapes[i].name, err)
			}
			return nil
		})
	}

	back := meshtest.Node(t, 75)
	var mu sync.Mutex
	got := map[string]int{}
	back.OnMessage(func(_ context.Context, _ peer.ID, m protocol.AgentMessage) (json.RawMessage, error) {
		mu.Lock()
		got[m.MessageID]++
		mu.Unlock()
		return nil, nil
	})
	meshtest.Connect(t, back, n)
	wait.For(t, 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		var missing []string
		for _, id := range acked {
			if got[id] == 0 {
				missing = append(missing, id)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d of %d messages answered queued not delivered: %v", len(missing), len(acked), missing)
		}
		return nil
	})
	t.Logf("full disk: %d queued (all delivered once the agent was back), %v refused with -32005", len(acked), refused)
}

// rpcCode is err's JSON-RPC error code, or 0.
func rpcCode(err error) int {
	if re, ok := errors.AsType[*rpc.Error](err); ok {
		return re.Code
	}
	return 0
}
