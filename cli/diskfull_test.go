//go:build linux

package cli

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

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/daemon"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/smallfs"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// TestSendMessageDiskFullRefused (issue 23, disk full on a node):
// `send-message --topic agent:<id>` to an agent that is away, from a node
// whose data directory is on a full filesystem, exits nonzero with the
// cause (no space left on device) and acknowledges nothing; once space
// returns, sending resumes by itself, and every message acknowledged as
// queued, before and after, reaches the agent when it is back.
func TestSendMessageDiskFullRefused(t *testing.T) {
	dir := smallfs.Mount(t, "8m")
	st := openTestStore(t, filepath.Join(dir, daemon.StoreFileName))
	n := meshtest.Node(t, 72, node.WithStore(st))
	api := serveStoreAPI(t, n, st)
	var mu sync.Mutex
	got := map[string]int{}
	note := func() node.Option {
		return node.WithServices(node.Service{Capability: protocol.Capability{Name: "note"}, Handler: handler(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
			var p struct {
				Seq string `json:"seq"`
			}
			if err := json.Unmarshal(c.Request.Params, &p); err != nil {
				return nil, err
			}
			mu.Lock()
			got[p.Seq]++
			mu.Unlock()
			return json.RawMessage(`{"ok":true}`), nil
		})})
	}
	away := meshtest.Node(t, 73, note())
	meshtest.Connect(t, n, away)
	to := away.AgentID()
	if err := away.Close(); err != nil {
		t.Fatal(err)
	}

	text := strings.Repeat("x", 32<<10)
	send := func(seq string) result {
		return runCLI(t, "", "send-message", "--bus", "ws://"+api+"/", "--topic", "agent:"+to,
			"--payload", `{"type":"note","seq":"`+seq+`","text":"`+text+`"}`)
	}
	var acked []string
	queued := func(seq string, res result) bool {
		var sr bus.SendResult
		if res.code != ExitOK {
			return false
		}
		if err := json.Unmarshal([]byte(res.stdout), &sr); err != nil || !sr.Success || len(sr.Acks) != 1 || !sr.Acks[0].Queued {
			t.Fatalf("send-message %s exited 0 with %s (%v), want one queued ack", seq, res.stdout, err)
		}
		acked = append(acked, seq)
		return true
	}
	if res := send("before"); !queued("before", res) {
		t.Fatalf("send-message before the disk filled: exit %d: %s", res.code, res.stderr)
	}

	// The bus records its history in the background: once "before" is
	// in it, no write is pending when the disk fills, and the first send
	// on a full disk meets the outbox's write, not a history write's.
	wait.For(t, 30*time.Second, func() error {
		hist, err := st.History(context.Background(), store.HistoryQuery{Topic: "agent:" + to, Limit: 10})
		if err != nil || len(hist) == 0 {
			return fmt.Errorf("the bus's history has %d messages (%v)", len(hist), err)
		}
		return nil
	})
	filler := filepath.Join(dir, "filler")
	smallfs.Fill(t, filler)
	refused, lastErr := 0, ""
	for i := range 40 {
		seq := fmt.Sprintf("full-%d", i)
		res := send(seq)
		if queued(seq, res) {
			continue
		}
		refused++
		lastErr = res.stderr
		if res.code != ExitFailure || !strings.Contains(res.stderr, "no space left on device") || !strings.Contains(res.stderr, "not accepted") {
			t.Fatalf("send-message %s on a full disk: exit %d, stdout %q, stderr %q; want exit 1 saying why", seq, res.code, res.stdout, res.stderr)
		}
		if strings.Contains(res.stdout, `"success":true`) || strings.Contains(res.stderr, "is queued") {
			t.Fatalf("a refused message was acknowledged: stdout %q, stderr %q", res.stdout, res.stderr)
		}
	}
	if refused == 0 {
		t.Fatalf("all %d messages were queued on a full disk", len(acked))
	}

	// Space returns: sending resumes by itself.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 30*time.Second, func() error {
		if res := send("after"); !queued("after", res) {
			return fmt.Errorf("send-message after space returned: exit %d: %s", res.code, res.stderr)
		}
		return nil
	})

	// Every message acknowledged reaches the agent once it is back.
	back := meshtest.Node(t, 73, note())
	meshtest.Connect(t, back, n)
	wait.For(t, 60*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		var missing []string
		for _, seq := range acked {
			if got[seq] == 0 {
				missing = append(missing, seq)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("%d of %d acknowledged messages not delivered: %v", len(missing), len(acked), missing)
		}
		return nil
	})
	if err := errors.New(lastErr); !strings.Contains(err.Error(), "not accepted") {
		t.Fatal(err)
	}
	t.Logf("full disk: %d queued (all delivered once the agent was back), %d refused: %s", len(acked), refused, strings.TrimSpace(lastErr))
}
