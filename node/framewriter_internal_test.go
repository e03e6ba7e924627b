package node

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// slowWriter records writes, each taking a while, so that frames queue
// behind them; it fails every write once failAfter writes succeeded.
type slowWriter struct {
	mu        sync.Mutex
	buf       bytes.Buffer
	writes    int
	failAfter int
}

func (sw *slowWriter) Write(p []byte) (int, error) {
	time.Sleep(50 * time.Microsecond) // a write's cost, not a wait for an event
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.failAfter > 0 && sw.writes >= sw.failAfter {
		return 0, errors.New("stream reset")
	}
	sw.writes++
	return sw.buf.Write(p)
}

func (sw *slowWriter) SetWriteDeadline(time.Time) error { return nil }

// Concurrent frames are written whole, each once, fewer writes than frames.
func TestFrameWriterCoalesces(t *testing.T) {
	sw := &slowWriter{}
	w := newFrameWriter(sw, time.Second)
	const senders, each = 32, 50
	var wg sync.WaitGroup
	for i := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				if err := w.write(protocol.AppendFrame(nil, fmt.Appendf(nil, "%d/%d", i, j))); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	fr := protocol.NewFrameReader(&sw.buf, 0)
	for {
		f, err := fr.Next()
		if err != nil {
			break
		}
		if seen[string(f)] {
			t.Fatalf("frame %s written twice", f)
		}
		seen[string(f)] = true
	}
	if len(seen) != senders*each {
		t.Fatalf("%d frames read back, want %d", len(seen), senders*each)
	}
	if sw.writes >= senders*each {
		t.Errorf("%d writes for %d frames: nothing coalesced", sw.writes, senders*each)
	}
}

// After a failed write every sender, queued or later, gets an error.
func TestFrameWriterBroken(t *testing.T) {
	sw := &slowWriter{failAfter: 1}
	w := newFrameWriter(sw, time.Second)
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if w.write([]byte("x")) != nil {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed == 0 {
		t.Fatal("no sender saw the failed write")
	}
	if err := w.write([]byte("y")); err == nil {
		t.Fatal("write after a failure succeeded")
	}
}
