//go:build linux

package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/meshagent/meshagent/internal/smallfs"
	"github.com/meshagent/meshagent/internal/testlog"
)

// TestWriteOnAFullDiskIsErrWrite: a write the store cannot commit (no
// space left on device) matches ErrWrite and keeps the cause; a write
// refused for what it holds (a queue's bound) does not. Every write that
// returned nil is there once space returns, and writes succeed again.
func TestWriteOnAFullDiskIsErrWrite(t *testing.T) {
	dir := smallfs.Mount(t, "8m")
	s, err := Open(filepath.Join(dir, "meshagent.db"), WithPruneInterval(0), WithLogger(testlog.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })

	filler := filepath.Join(dir, "filler")
	smallfs.Fill(t, filler)
	payload := json.RawMessage(`{"text":"` + strings.Repeat("x", 16<<10) + `"}`)
	var kept []string
	var werr error
	for i := range 200 {
		m := Message{ID: fmt.Sprintf("m%03d", i), Topic: "t", To: "agent-b", From: "agent-a", Queue: "q", Payload: payload}
		err := s.EnqueueWithin(ctx, m, Bounds{PerRecipient: 1000})
		if err == nil {
			kept = append(kept, m.ID)
			continue
		}
		werr = err
		break
	}
	if !errors.Is(werr, ErrWrite) || !errors.Is(werr, syscall.ENOSPC) {
		t.Fatalf("a write on a full disk: %v, want ErrWrite wrapping ENOSPC", werr)
	}
	m := Message{ID: "bounded", Topic: "t", To: "agent-b", From: "agent-a", Queue: "q", Payload: payload}
	if err := s.EnqueueWithin(ctx, m, Bounds{Bytes: 1024}); !errors.Is(err, ErrFull) || errors.Is(err, ErrWrite) {
		t.Fatalf("a write past its bound: %v, want ErrFull, not ErrWrite", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	m.ID = "after"
	if err := s.EnqueueWithin(ctx, m, Bounds{PerRecipient: 1000}); err != nil {
		t.Fatalf("a write once space returned: %v", err)
	}
	got, err := s.PendingIn(ctx, "q", 1000)
	if err != nil {
		t.Fatal(err)
	}
	in := map[string]bool{}
	for _, m := range got {
		in[m.ID] = true
	}
	for _, id := range append(kept, "after") {
		if !in[id] {
			t.Errorf("%s was written (nil) and is not in the queue", id)
		}
	}
	t.Logf("full disk: %d writes kept, then %v", len(kept), werr)
}
