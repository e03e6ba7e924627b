package store

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func TestOpenLockedFileTimesOut(t *testing.T) {
	s, _ := open(t)
	start := time.Now()
	_, err := Open(s.Path(), WithOpenTimeout(50*time.Millisecond), WithPruneInterval(0))
	if err == nil {
		t.Fatal("a second Open of a file in use succeeded")
	}
	if !strings.Contains(err.Error(), s.Path()) {
		t.Errorf("error %q does not name the file", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Open waited %v", d)
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket([]byte(bucketMeta))
		if err != nil {
			return err
		}
		return b.Put([]byte("schema"), []byte{schemaVersion + 1})
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(path, WithPruneInterval(0)); err == nil || !strings.Contains(err.Error(), "schema version") {
		t.Fatalf("Open of a newer file: %v", err)
	}
}

func TestCorruptIndexKeys(t *testing.T) {
	tests := []struct {
		bucket string
		key    []byte
		q      HistoryQuery
	}{
		{bucketIdxTopic, []byte("inbound:x"), HistoryQuery{Topic: "inbound:*"}},        // no NUL
		{bucketIdxTopic, []byte("inbound:x\x00abc"), HistoryQuery{Topic: "inbound:*"}}, // short time
		{bucketIdxAgent, []byte("alice\x00abc"), HistoryQuery{Agent: "alice"}},         // short time
		{bucketHistory, []byte("abc"), HistoryQuery{}},                                 // short primary key
		{bucketOutboxDue, []byte("short"), HistoryQuery{}},                             // checked through Due
	}
	for _, tt := range tests {
		t.Run(tt.bucket+"/"+string(tt.key), func(t *testing.T) {
			s, _ := open(t)
			if err := s.db.Update(func(tx *bolt.Tx) error {
				return tx.Bucket([]byte(tt.bucket)).Put(tt.key, nil)
			}); err != nil {
				t.Fatal(err)
			}
			var err error
			if tt.bucket == bucketOutboxDue {
				_, err = s.Due(ctx, t0, 0)
			} else {
				_, err = s.History(ctx, tt.q)
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Bucket != tt.bucket {
				t.Fatalf("got %v, want a CorruptError in %s", err, tt.bucket)
			}
		})
	}
}
