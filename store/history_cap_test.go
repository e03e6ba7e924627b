package store

import (
	"fmt"
	bolt "go.etcd.io/bbolt"
	"strings"
	"testing"
	"time"
)

// History is bounded in size as well as in age: past WithMaxHistoryBytes
// the oldest records go first, with their index entries, and the newest
// are all kept; the counted size survives a reopen.
func TestHistorySizeCap(t *testing.T) {
	const capBytes = 8 << 10
	s, _ := open(t, WithMaxHistoryBytes(capBytes))
	payload := []byte(`{"text":"` + strings.Repeat("x", 200) + `"}`)
	const n = 200 // about 60 KiB recorded: many times the cap
	for i := range n {
		m := Message{ID: fmt.Sprintf("m%03d", i), Topic: "inbound:chat", From: "alice", ConversationID: "c1",
			Payload: payload, Time: t0.Add(time.Duration(i) * time.Second)}
		if err := s.Record(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.History(ctx, HistoryQuery{Limit: MaxHistoryLimit})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || len(got) >= n/2 {
		t.Fatalf("%d of %d records kept under a cap of %d bytes", len(got), n, capBytes)
	}
	// The newest ones, in order, with nothing missing in between.
	for i, m := range got {
		if want := fmt.Sprintf("m%03d", n-1-i); m.ID != want {
			t.Fatalf("record %d is %s, want %s", i, m.ID, want)
		}
	}
	if kept := countKeys(t, s, bucketHistory); kept != len(got) {
		t.Fatalf("history bucket holds %d, History returned %d", kept, len(got))
	}
	for _, b := range []string{bucketHistoryIDs, bucketIdxTopic, bucketIdxConv, bucketIdxAgent} {
		if c := countKeys(t, s, b); c != len(got) {
			t.Errorf("%s holds %d entries for %d records: index entries of deleted records left behind", b, c, len(got))
		}
	}
	if err := s.db.View(func(tx *bolt.Tx) error {
		counted, stored, err := historySize(tx)
		if err != nil || !stored || counted > capBytes || counted < capBytes/2 {
			return fmt.Errorf("counted size %d (stored %v, err %v), cap %d", counted, stored, err, capBytes)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("kept %d of %d records", len(got), n)
}
