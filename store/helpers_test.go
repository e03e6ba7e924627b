package store

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/meshagent/meshagent/internal/testlog"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// t0 is the fake clock's start.
var t0 = time.Date(2026, 2, 5, 20, 0, 0, 0, time.UTC)

// fakeClock is a settable clock.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *fakeClock { return &fakeClock{now: t0} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// open opens a store in a temporary directory with the pruner off and a
// fake clock, closed at the end of the test.
func open(t testing.TB, opts ...Option) (*Store, *fakeClock) {
	t.Helper()
	clk := newClock()
	opts = append([]Option{WithClock(clk.Now), WithPruneInterval(0), WithLogger(testlog.New(t))}, opts...)
	s, err := Open(filepath.Join(t.TempDir(), "meshagent.db"), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s, clk
}

func msg(id, topic string) Message {
	return Message{ID: id, Topic: topic, From: "agent-a", Payload: json.RawMessage(`{"text":"hi"}`)}
}

func ids(ms []Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func dlIDs(ds []DeadLetter) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.ID
	}
	return out
}

var ctx = context.Background()

// keys returns the keys of bucket b, read directly from the file.
func keys(t testing.TB, s *Store, b string) [][]byte {
	t.Helper()
	var out [][]byte
	err := s.db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(b)).ForEach(func(k, _ []byte) error {
			out = append(out, bytes.Clone(k))
			return nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func countKeys(t testing.TB, s *Store, b string) int {
	t.Helper()
	return len(keys(t, s, b))
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
