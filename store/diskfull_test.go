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
	"time"

	"github.com/meshagent/meshagent/internal/smallfs"
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/internal/wait"
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

// TestReserveTakesTheWriteThatMeetsAFullDisk: with WithReserve, the
// first write that meets a full disk is committed in the reserve's room
// (it may hold what was already acknowledged), SpaceLow reports the disk
// full from then on, and new queue entries are refused with ErrSpaceLow
// (matching ErrWrite) while writes of what is already there still land.
// Once space returns the store writes its reserve again by itself and
// accepts new entries.
func TestReserveTakesTheWriteThatMeetsAFullDisk(t *testing.T) {
	dir := smallfs.Mount(t, "8m")
	path := filepath.Join(dir, "meshagent.db")
	s, err := Open(path, WithPruneInterval(0), WithLogger(testlog.New(t)), WithReserve(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if fi, err := os.Stat(path + ".reserve"); err != nil || fi.Size() != 1<<20 {
		t.Fatalf("the reserve file: %v %v, want 1 MiB", fi, err)
	}
	if err := s.SpaceLow(); err != nil {
		t.Fatalf("SpaceLow with room: %v", err)
	}

	filler := filepath.Join(dir, "filler")
	smallfs.Fill(t, filler)
	payload := json.RawMessage(`{"text":"` + strings.Repeat("x", 16<<10) + `"}`)
	// History is written until the disk is full: each write lands, the
	// one that meets the full disk in the reserve's room.
	recorded := 0
	for i := 0; s.SpaceLow() == nil; i++ {
		if i == 1000 {
			t.Fatal("the disk never filled up")
		}
		if err := s.Record(ctx, Message{ID: fmt.Sprintf("h%03d", i), Topic: "t", From: "a", Payload: payload}); err != nil {
			t.Fatalf("history write %d on a full disk with its reserve: %v", i, err)
		}
		recorded++
	}
	if _, err := os.Stat(path + ".reserve"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the reserve file after it was spent: %v", err)
	}
	err = s.EnqueueWithin(ctx, Message{ID: "new", Topic: "t", To: "b", From: "a", Queue: "q", Payload: payload}, Bounds{PerRecipient: 1000})
	if !errors.Is(err, ErrSpaceLow) || !errors.Is(err, ErrWrite) || !strings.Contains(err.Error(), "no space left on device") {
		t.Fatalf("a new queue entry with the reserve spent: %v, want ErrSpaceLow and ErrWrite", err)
	}
	hist, err := s.History(ctx, HistoryQuery{Topic: "t", Limit: MaxHistoryLimit})
	if err != nil || len(hist) != recorded {
		t.Fatalf("history holds %d of the %d messages recorded (%v)", len(hist), recorded, err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() error { return s.SpaceLow() })
	if fi, err := os.Stat(path + ".reserve"); err != nil || fi.Size() != 1<<20 {
		t.Fatalf("the reserve file once space returned: %v %v, want 1 MiB", fi, err)
	}
	if err := s.EnqueueWithin(ctx, Message{ID: "after", Topic: "t", To: "b", From: "a", Queue: "q", Payload: payload}, Bounds{PerRecipient: 1000}); err != nil {
		t.Fatalf("a new queue entry once space returned: %v", err)
	}
	t.Logf("full disk: %d history writes landed, the last in the reserve's room", recorded)
}
