package store

import (
	"bytes"
	"errors"
	bolt "go.etcd.io/bbolt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"go.uber.org/goleak"
)

// indexedIDs returns the ids referenced by the keys of an index bucket.
func indexedIDs(t *testing.T, s *Store, b string) []string {
	t.Helper()
	var out []string
	for _, k := range keys(t, s, b) {
		i := bytes.IndexByte(k, 0)
		if i < 0 || len(k) < i+1+8 {
			t.Fatalf("malformed key %q in %s", k, b)
		}
		out = append(out, string(k[i+1+8:]))
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func TestPrune(t *testing.T) {
	s, _ := open(t, WithRetention(24*time.Hour))
	now := t0.Add(30 * 24 * time.Hour)
	rows := []struct {
		id  string
		age time.Duration
	}{
		{"old1", 25 * 24 * time.Hour},
		{"old2", 24*time.Hour + time.Nanosecond},
		{"edge", 24 * time.Hour}, // exactly the retention: kept
		{"new1", time.Hour},
		{"new2", 0},
	}
	for _, r := range rows {
		m := Message{ID: r.id, Topic: "topic-" + r.id, From: "from-" + r.id, To: "to-" + r.id,
			ConversationID: "conv-" + r.id, Payload: []byte(`1`), Time: now.Add(-r.age)}
		if err := s.Record(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.Prune(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("Prune deleted %d, want 2", n)
	}
	want := []string{"edge", "new1", "new2"}
	got, err := s.History(ctx, HistoryQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if g := slices.Sorted(slices.Values(ids(got))); !slices.Equal(g, want) {
		t.Errorf("history after Prune: %v, want %v", g, want)
	}
	// The index buckets are checked directly: nothing refers to a pruned id.
	for _, b := range []string{bucketIdxAgent, bucketIdxTopic, bucketIdxConv} {
		if g := indexedIDs(t, s, b); !slices.Equal(g, want) {
			t.Errorf("%s refers to %v, want %v", b, g, want)
		}
	}
	if n := countKeys(t, s, bucketIdxAgent); n != 2*len(want) {
		t.Errorf("agent index has %d entries, want %d (from and to)", n, 2*len(want))
	}
	var idKeys []string
	for _, k := range keys(t, s, bucketHistoryIDs) {
		idKeys = append(idKeys, string(k))
	}
	if !slices.Equal(idKeys, want) {
		t.Errorf("history_ids %v, want %v", idKeys, want)
	}
	// A pruned id can be recorded again (its id entry is gone too).
	if err := s.Record(ctx, Message{ID: "old1", Topic: "t", Payload: []byte(`1`), Time: now}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.History(ctx, HistoryQuery{Topic: "t"}); len(got) != 1 {
		t.Errorf("re-recorded pruned id: %v", ids(got))
	}
	// Nothing left to prune.
	if n, err := s.Prune(ctx, now); err != nil || n != 0 {
		t.Errorf("second Prune: %d, %v", n, err)
	}
}

// TestPruneManyChunks prunes more than one transaction's worth.
func TestPruneManyChunks(t *testing.T) {
	s, _ := open(t, WithRetention(time.Hour))
	const old, recent = 1300, 7
	var ms []Message
	for i := range old + recent {
		age := 2 * time.Hour
		if i >= old {
			age = 0
		}
		m := msg("", "t")
		m.Time = t0.Add(-age + time.Duration(i))
		ms = append(ms, m)
	}
	if err := s.recordAll(ms); err != nil {
		t.Fatal(err)
	}
	n, err := s.Prune(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if n != old {
		t.Errorf("pruned %d, want %d", n, old)
	}
	for _, b := range []string{bucketHistory, bucketHistoryIDs, bucketIdxTopic, bucketIdxAgent} {
		if got := countKeys(t, s, b); got != recent {
			t.Errorf("%s has %d entries, want %d", b, got, recent)
		}
	}
}

func TestPruneCorruptRecord(t *testing.T) {
	s, _ := open(t, WithRetention(time.Hour))
	if err := s.Record(ctx, Message{ID: "bad", Topic: "t", Payload: []byte(`1`), Time: t0.Add(-2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Update(func(tx *bolt.Tx) error {
		pk := tx.Bucket([]byte(bucketHistoryIDs)).Get([]byte("bad"))
		return tx.Bucket([]byte(bucketHistory)).Put(pk, []byte("garbage"))
	}); err != nil {
		t.Fatal(err)
	}
	n, err := s.Prune(ctx, t0)
	if err != nil || n != 1 {
		t.Fatalf("Prune over a corrupt record: %d, %v", n, err)
	}
	// Its index entry dangles; queries skip it.
	if got, err := s.History(ctx, HistoryQuery{Topic: "t"}); err != nil || len(got) != 0 {
		t.Errorf("History over a dangling index entry: %v, %v", ids(got), err)
	}
}

// TestPruner runs the background pruner with a short interval and checks
// that it prunes, and that Close stops it (goleak).
func TestPruner(t *testing.T) {
	defer goleak.VerifyNone(t)
	clk := newClock()
	s, err := Open(filepath.Join(t.TempDir(), "p.db"), WithClock(clk.Now),
		WithRetention(time.Hour), WithPruneInterval(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Record(ctx, Message{ID: "m", Topic: "t", Payload: []byte(`1`), Time: t0}); err != nil {
		t.Fatal(err)
	}
	wait.Holds(t, 50*time.Millisecond, func() error {
		if n := countKeys(t, s, bucketHistory); n != 1 {
			return errors.New("a recent message was pruned")
		}
		return nil
	})
	clk.Add(2 * time.Hour)
	wait.For(t, 30*time.Second, func() error {
		if n := countKeys(t, s, bucketHistory) + countKeys(t, s, bucketIdxTopic) + countKeys(t, s, bucketIdxAgent); n != 0 {
			return errors.New("old message not pruned yet")
		}
		return nil
	})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}
