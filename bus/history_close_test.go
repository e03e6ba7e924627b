package bus_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/store"
)

// TestBusCloseKeepsHistory: every message a sendMessage answered is in the
// history once Close returns, including those a background writer had
// taken from its queue but not yet committed when Close began.
func TestBusCloseKeepsHistory(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "bus.db"))
	srv, url := busServer(t, fakemesh.New(), st)
	sub := newPeer(t, url, "sub", nil)
	sub.subscribe(t, map[string]any{"topic": "hist:*"})
	sender := newPeer(t, url, "sender", nil)
	const n = 40
	for i := range n {
		if res := sender.send(t, "hist:1", "m"); !res.Success {
			t.Fatalf("message %d: %+v", i, res)
		}
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	msgs, err := st.History(ctxT(t), store.HistoryQuery{Topic: "hist:1", Limit: 2 * n})
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != n {
		t.Errorf("history holds %d of the %d messages sent before Close", len(msgs), n)
	}
}

// TestBusHistoryShareCommits: history is written in batches that share a
// commit, not a commit per message (what made the store cost a quarter of
// a round trip's CPU), and every message sent is in it.
func TestBusHistoryShareCommits(t *testing.T) {
	reg := prometheus.NewRegistry()
	st, err := store.Open(filepath.Join(t.TempDir(), "bus.db"), store.WithMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	_, url := busServer(t, fakemesh.New(), st)
	sub := newPeer(t, url, "sub", nil)
	sub.subscribe(t, map[string]any{"topic": "batch:*"})
	before := storeCommits(t, reg)
	// Eight senders keep eight messages in flight: however slow the
	// machine, each of the writer's windows then holds several.
	const senders, each = 8, 50
	var wg sync.WaitGroup
	for i := range senders {
		sender := newPeer(t, url, "sender"+string(rune('a'+i)), nil)
		wg.Go(func() {
			for range each {
				sender.send(t, "batch:1", "m")
			}
		})
	}
	wg.Wait()
	const n = senders * each
	wait.For(t, 30*time.Second, func() error {
		msgs, err := st.History(ctxT(t), store.HistoryQuery{Topic: "batch:1", Limit: 2 * n})
		if err != nil {
			return err
		}
		if len(msgs) != n {
			return fmt.Errorf("history holds %d of the %d messages sent", len(msgs), n)
		}
		return nil
	})
	if commits := storeCommits(t, reg) - before; commits > n/4 {
		t.Errorf("%d messages took %d store commits; batches should share them (at most %d)", n, commits, n/4)
	}
}

// storeCommits is how many writes the store has committed.
func storeCommits(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "meshagent_store_commit_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount()
		}
	}
	t.Fatal("no meshagent_store_commit_seconds")
	return 0
}
