package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestMetrics reads the outbox and dead-letter gauges, the file's size
// and one commit observation per write.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := open(t, WithMetrics(reg))
	ctx := context.Background()
	for _, id := range []string{"m1", "m2", "m3"} {
		if err := s.Enqueue(ctx, msg(id, "t")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delivered(ctx, "m1"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeadLetter(ctx, msg("d1", "t"), "gave up"); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP meshagent_store_dead_letters Dead letters kept in the store.
# TYPE meshagent_store_dead_letters gauge
meshagent_store_dead_letters 1
# HELP meshagent_store_outbox_messages Messages in the outbox (retries, and messages waiting for their recipient), every queue included.
# TYPE meshagent_store_outbox_messages gauge
meshagent_store_outbox_messages 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "meshagent_store_outbox_messages", "meshagent_store_dead_letters"); err != nil {
		t.Error(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(s.Path())
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		m := mf.GetMetric()[0]
		switch mf.GetName() {
		case "meshagent_store_commit_seconds":
			if got := m.GetHistogram().GetSampleCount(); got != 5 {
				t.Errorf("%d commits observed, want 5 (three enqueued, one delivered, one dead letter)", got)
			}
		case "meshagent_store_size_bytes":
			if got := m.GetGauge().GetValue(); got != float64(fi.Size()) || got == 0 {
				t.Errorf("size %v, the file has %d bytes", got, fi.Size())
			}
		}
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 4 {
		t.Errorf("%d series (%v), want 4", n, err)
	}
}

func TestMetricsClosed(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, _ := open(t, WithMetrics(reg))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Gather(); err != nil {
		t.Fatalf("a scrape after Close: %v", err)
	}
	if _, err := Open(filepath.Join(t.TempDir(), "second.db"), WithMetrics(reg)); err == nil {
		t.Fatal("a second store on the same registry was accepted")
	}
}
