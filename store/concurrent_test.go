package store

import (
	"errors"
	"fmt"
	bolt "go.etcd.io/bbolt"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestConcurrentEnqueueGroupCommit enqueues from many goroutines, so that
// writes share group commits, with duplicates and invalid messages mixed
// in: a failing write fails alone and every other write lands once.
func TestConcurrentEnqueueGroupCommit(t *testing.T) {
	for name, opts := range map[string][]Option{
		"group":      nil,
		"bolt batch": {WithBatchDelay(time.Millisecond)},
		"solo":       {withSoloCommits()},
	} {
		t.Run(name, func(t *testing.T) { testConcurrentEnqueue(t, opts...) })
	}
}

func testConcurrentEnqueue(t *testing.T, opts ...Option) {
	s, _ := open(t, opts...)
	const workers, each = 16, 40
	var wg sync.WaitGroup
	errs := make(chan error, workers*each*2)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("w%d-%d", w, i)
				if err := s.Enqueue(ctx, msg(id, "t")); err != nil {
					errs <- fmt.Errorf("enqueue %s: %w", id, err)
				}
				// Every id is enqueued twice: the second must fail with
				// ErrExists, inside whatever batch it lands in.
				if err := s.Enqueue(ctx, msg(id, "t")); !errors.Is(err, ErrExists) {
					errs <- fmt.Errorf("duplicate %s: %v, want ErrExists", id, err)
				}
				if i%10 == 0 {
					bad := msg(id+"-bad", "")
					if err := s.Enqueue(ctx, bad); !errors.Is(err, ErrInvalid) {
						errs <- fmt.Errorf("invalid %s: %v, want ErrInvalid", id, err)
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	p, err := s.Pending(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != workers*each {
		t.Fatalf("%d pending, want %d", len(p), workers*each)
	}
	seen := map[string]bool{}
	for _, m := range p {
		if seen[m.ID] {
			t.Fatalf("%s pending twice", m.ID)
		}
		seen[m.ID] = true
	}
	for _, b := range []string{bucketOutboxIDs, bucketOutboxDue} {
		if n := countKeys(t, s, b); n != workers*each {
			t.Errorf("%s has %d entries, want %d", b, n, workers*each)
		}
	}
}

// TestCloseDuringWrites closes the store while writers and readers run:
// each call either succeeds or returns ErrClosed, and what succeeded is on
// disk.
func TestCloseDuringWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.db")
	s, err := Open(path, WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var acked []string
	var wg sync.WaitGroup
	started := make(chan struct{})
	var once sync.Once
	for w := range 8 {
		wg.Go(func() {
			for i := 0; ; i++ {
				id := fmt.Sprintf("w%d-%d", w, i)
				err := s.Enqueue(ctx, msg(id, "t"))
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Errorf("enqueue: %v", err)
					return
				}
				mu.Lock()
				acked = append(acked, id)
				if len(acked) == 100 {
					once.Do(func() { close(started) })
				}
				mu.Unlock()
				if _, err := s.Pending(ctx, 1); err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("pending: %v", err)
					return
				}
			}
		})
	}
	<-started
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	s, err = Open(path, WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	stored := map[string]bool{}
	for _, k := range keys(t, s, bucketOutboxIDs) {
		stored[string(k)] = true
	}
	for _, id := range acked {
		if !stored[id] {
			t.Errorf("acknowledged %s lost across Close", id)
		}
	}
}

// TestGroupCommitPanic checks that a write function that panics fails
// alone and does not leave the rest of its group waiting.
func TestGroupCommitPanic(t *testing.T) {
	s, _ := open(t)
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Go(func() {
			errs[i] = s.update(ctx, func(tx *bolt.Tx) error {
				if i == 7 {
					panic("boom")
				}
				return tx.Bucket([]byte(bucketMeta)).Put([]byte(fmt.Sprint("k", i)), []byte("v"))
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if (i == 7) != (err != nil) {
			t.Errorf("write %d: %v", i, err)
		}
	}
	if n := countKeys(t, s, bucketMeta); n != 1+19 {
		t.Errorf("meta has %d keys, want 20 (schema and 19 writes)", n)
	}
}
