package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// TestOutboxAwayAgentCostsOneAttemptPerStep: 200 messages wait for an
// agent that answers CAPABILITY_NOT_SUPPORTED (no handler attached). The
// sender makes one attempt per backoff step for the agent, not one per
// message, and a hello from the agent (a wake-up) costs one attempt and
// a couple of commits, not a commit per message. Before, the sender made
// 229 attempts in 6 s and each hello rewrote every message in its own
// commit.
func TestOutboxAwayAgentCostsOneAttemptPerStep(t *testing.T) {
	// MESHAGENT_TEST_HELLOS=25 measures the 25 hellos; each
	// waits for an attempt to end, seconds on a loaded machine.
	const queued = 200
	hellos := 5
	if v, err := strconv.Atoi(os.Getenv("MESHAGENT_TEST_HELLOS")); err == nil && v > 0 {
		hellos = v
	}
	reg := prometheus.NewRegistry()
	st, err := store.Open(filepath.Join(t.TempDir(), "sender.db"), store.WithPruneInterval(0), store.WithMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	a := meshtest.Node(t, mbSender, node.WithStore(st))
	b := meshtest.Node(t, mbAgent, node.WithMessageHandler(func(context.Context, peer.ID, protocol.AgentMessage) (json.RawMessage, error) {
		return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "not attached yet")
	}))
	meshtest.Connect(t, a, b)

	ctx := meshtest.Context(t, time.Minute)
	for i := range queued {
		params, _ := json.Marshal(protocol.AgentMessage{MessageID: fmt.Sprint("m-", i), Subject: "queued", Body: strings.Repeat("x", 1024)})
		if _, err := a.Forward(ctx, fmt.Sprint("m-", i), b.ID().String(), protocol.MessageCapability, params); err != nil {
			t.Fatal(err)
		}
	}
	wait.For(t, 30*time.Second, func() error {
		if n := node.OutboxAttempts(a); n == 0 {
			return fmt.Errorf("no attempt yet")
		}
		return nil
	})

	// Six seconds of backoff: steps at about 1, 2, 3, 4.5 s.
	attempts0, commits0, bytes0 := node.OutboxAttempts(a), commits(t, reg), writtenBytes(t)
	window := 6 * time.Second
	wait.Holds(t, window, func() error { return nil })
	attempts, commitsN, written := node.OutboxAttempts(a)-attempts0, commits(t, reg)-commits0, writtenBytes(t)-bytes0
	t.Logf("away agent, %d messages, %s: %d attempts, %d commits, %d bytes written", queued, window, attempts, commitsN, written)
	if attempts > 12 {
		t.Fatalf("%d attempts in %s for one away agent, want one per backoff step", attempts, window)
	}
	if commitsN > 2*attempts+4 {
		t.Fatalf("%d commits for %d attempts", commitsN, attempts)
	}

	attempts0, commits0, bytes0 = node.OutboxAttempts(a), commits(t, reg), writtenBytes(t)
	for range hellos {
		before := node.OutboxAttempts(a)
		node.Seen(a, b.ID())
		wait.For(t, 20*time.Second, func() error {
			if node.OutboxAttempts(a) == before {
				return fmt.Errorf("the wake-up made no attempt")
			}
			// Its pass is over once nothing is due: hellos come seconds
			// apart, not during the attempt one made.
			if next, ok, err := st.NextDueIn(context.Background(), "node"); err != nil || !ok || !next.After(time.Now()) {
				return fmt.Errorf("the pass is not over (%v)", err)
			}
			return nil
		})
	}
	attempts, commitsN, written = node.OutboxAttempts(a)-attempts0, commits(t, reg)-commits0, writtenBytes(t)-bytes0
	t.Logf("%d hellos: %d attempts, %d commits, %d bytes written", hellos, attempts, commitsN, written)
	// A wake-up: one commit making the messages due, one attempt, one
	// commit moving them all; backoff steps meanwhile add a few.
	if commitsN > uint64(3*hellos+10) {
		t.Fatalf("%d commits for %d hellos, want about 2 each", commitsN, hellos)
	}
	if n := queuedFor(t, st, b.ID().String()); n != queued {
		t.Fatalf("the outbox holds %d, want %d", n, queued)
	}
}

// commits is the store's count of commits.
func commits(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "meshagent_store_commit_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatal("no meshagent_store_commit_seconds")
	return 0
}

// writtenBytes is what this process has written to storage (Linux), 0
// where that is not known.
func writtenBytes(t *testing.T) uint64 {
	t.Helper()
	f, err := os.Open("/proc/self/io")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "write_bytes: "); ok {
			n, _ := strconv.ParseUint(v, 10, 64)
			return n
		}
	}
	return 0
}
