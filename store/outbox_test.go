package store

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/meshagent/meshagent/internal/testlog"
)

func TestOpenCreatesPrivateFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "sub")
	path := filepath.Join(dir, "meshagent.db")
	s, err := Open(path, WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		path string
		want os.FileMode
	}{{path, 0o600}, {dir, 0o700}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != c.want {
			t.Errorf("%s has mode %04o, want %04o", c.path, got, c.want)
		}
	}
	if s.db.NoSync {
		t.Error("NoSync is set: commits would not be fsync'd")
	}
}

func TestOpenOptionErrors(t *testing.T) {
	for name, opt := range map[string]Option{
		"retention":   WithRetention(0),
		"interval":    WithPruneInterval(-1),
		"size":        WithMaxRecordSize(0),
		"clock":       WithClock(nil),
		"logger":      WithLogger(nil),
		"batch delay": WithBatchDelay(-1),
		"reserve":     WithReserve(-1),
		"reserve big": WithReserve(2 << 30),
		"timeout":     WithOpenTimeout(0),
		"history cap": WithMaxHistoryBytes(0),
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.db")
			if _, err := Open(path, opt); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Open = %v, want ErrInvalidConfig", err)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused configuration created the file: %v", err)
			}
		})
	}
}

func TestEnqueueValidation(t *testing.T) {
	s, _ := open(t, WithMaxRecordSize(64))
	big := json.RawMessage(`"` + strings.Repeat("x", 70) + `"`)
	tests := []struct {
		name string
		m    Message
		want error
		msg  string // substring of the error
	}{
		{"empty topic", Message{Payload: json.RawMessage(`{}`)}, ErrInvalid, "empty topic"},
		{"empty payload", Message{Topic: "t"}, ErrInvalid, "payload"},
		{"oversize payload", Message{Topic: "t", Payload: big}, ErrTooLarge, "limit is 64"},
		{"oversize with metadata", Message{Topic: "t", Payload: json.RawMessage(`"` + strings.Repeat("x", 40) + `"`), Metadata: json.RawMessage(`"` + strings.Repeat("y", 40) + `"`)}, ErrTooLarge, "limit is 64"},
		{"NUL in topic", Message{Topic: "a\x00b", Payload: json.RawMessage(`1`)}, ErrInvalid, "NUL"},
		{"NUL in from", Message{Topic: "t", From: "x\x00", Payload: json.RawMessage(`1`)}, ErrInvalid, "NUL"},
		{"long id", Message{ID: strings.Repeat("i", maxIDLen+1), Topic: "t", Payload: json.RawMessage(`1`)}, ErrInvalid, "limit"},
		{"negative attempts", Message{Topic: "t", Payload: json.RawMessage(`1`), Attempts: -1}, ErrInvalid, "negative"},
		{"time out of range", Message{Topic: "t", Payload: json.RawMessage(`1`), Time: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}, ErrInvalid, "1678-2262"},
		{"valid", Message{Topic: "t", Payload: json.RawMessage(`{"ok":true}`)}, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.Enqueue(ctx, tt.m)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("Enqueue: %v, want %v", err, tt.want)
			}
			if err != nil && !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %q does not say %q", err, tt.msg)
			}
		})
	}
	p, err := s.Pending(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 1 {
		t.Fatalf("%d messages pending, want only the valid one", len(p))
	}
}

func TestEnqueueFillsIDAndTime(t *testing.T) {
	s, _ := open(t)
	id, err := s.EnqueueID(ctx, Message{Topic: "t", Payload: json.RawMessage(` { "a" : 1 } `)})
	if err != nil {
		t.Fatal(err)
	}
	if len(id) != 32 {
		t.Errorf("generated id %q is not 128-bit hex", id)
	}
	p, err := s.Pending(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(p) != 1 || p[0].ID != id {
		t.Fatalf("pending %v, want [%s]", ids(p), id)
	}
	if !p[0].Time.Equal(t0) || !p[0].NextAttempt.Equal(t0) {
		t.Errorf("time %v next %v, want the clock's %v", p[0].Time, p[0].NextAttempt, t0)
	}
	if string(p[0].Payload) != ` { "a" : 1 } ` {
		t.Errorf("payload bytes changed: %q", p[0].Payload)
	}
	id2, err := s.EnqueueID(ctx, Message{Topic: "t", Payload: json.RawMessage(`1`)})
	if err != nil {
		t.Fatal(err)
	}
	if id2 == id {
		t.Error("two generated ids are equal")
	}
}

func TestEnqueueDuplicate(t *testing.T) {
	s, _ := open(t)
	if err := s.Enqueue(ctx, msg("m1", "t")); err != nil {
		t.Fatal(err)
	}
	if err := s.Enqueue(ctx, msg("m1", "t")); !errors.Is(err, ErrExists) {
		t.Fatalf("second Enqueue: %v, want ErrExists", err)
	}
	if err := s.DeadLetter(ctx, msg("m1", "t"), "gave up"); err != nil {
		t.Fatal(err)
	}
	if err := s.Enqueue(ctx, msg("m1", "t")); !errors.Is(err, ErrExists) {
		t.Fatalf("Enqueue of a dead letter's id: %v, want ErrExists", err)
	}
}

func TestPendingOrderAndLimit(t *testing.T) {
	s, clk := open(t)
	// Enqueue order differs from time and id order.
	for i, id := range []string{"c", "a", "b", "e", "d"} {
		m := msg(id, "t")
		m.Time = t0.Add(-time.Duration(i) * time.Minute)
		if err := s.Enqueue(ctx, m); err != nil {
			t.Fatal(err)
		}
		clk.Add(-time.Second) // next attempt times go backwards too
	}
	tests := []struct {
		limit int
		want  []string
	}{
		{0, []string{"c", "a", "b", "e", "d"}},
		{-1, []string{"c", "a", "b", "e", "d"}},
		{2, []string{"c", "a"}},
		{5, []string{"c", "a", "b", "e", "d"}},
		{9, []string{"c", "a", "b", "e", "d"}},
	}
	for _, tt := range tests {
		got, err := s.Pending(ctx, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(ids(got), tt.want) {
			t.Errorf("Pending(%d) = %v, want %v", tt.limit, ids(got), tt.want)
		}
	}
}

func TestDueOrdering(t *testing.T) {
	s, clk := open(t)
	for _, id := range []string{"m1", "m2", "m3", "m4"} {
		if err := s.Enqueue(ctx, msg(id, "t")); err != nil {
			t.Fatal(err)
		}
		clk.Add(time.Second)
	}
	// m1..m4 are due at t0, t0+1s, t0+2s, t0+3s. Push m1 and m3 later.
	if err := s.Retry(ctx, "m1", "busy", t0.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := s.Retry(ctx, "m3", "busy", t0.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		now   time.Time
		limit int
		want  []string
	}{
		{"before anything", t0.Add(-time.Second), 0, nil},
		{"exactly m2's time", t0.Add(time.Second), 0, []string{"m2"}},
		{"m2 and m4", t0.Add(4 * time.Second), 0, []string{"m2", "m4"}},
		{"m3 after its retry time", t0.Add(5 * time.Second), 0, []string{"m2", "m4", "m3"}},
		{"all", t0.Add(time.Hour), 0, []string{"m2", "m4", "m3", "m1"}},
		{"limit", t0.Add(time.Hour), 2, []string{"m2", "m4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Due(ctx, tt.now, tt.limit)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(ids(got), tt.want) {
				t.Errorf("Due = %v, want %v", ids(got), tt.want)
			}
		})
	}
	// Equal next-attempt times come out in enqueue order.
	for _, id := range []string{"m4", "m2"} {
		if err := s.Retry(ctx, id, "", t0.Add(20*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Due(ctx, t0.Add(time.Hour), 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"m3", "m1", "m2", "m4"}; !slices.Equal(ids(got), want) {
		t.Errorf("Due with ties = %v, want %v", ids(got), want)
	}
}

func TestRetry(t *testing.T) {
	s, _ := open(t)
	if err := s.Enqueue(ctx, msg("m1", "t")); err != nil {
		t.Fatal(err)
	}
	next := t0.Add(5 * time.Second)
	for i := 1; i <= 3; i++ {
		if err := s.Retry(ctx, "m1", "agent_unavailable", next); err != nil {
			t.Fatal(err)
		}
		p, err := s.Pending(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if p[0].Attempts != i || p[0].LastError != "agent_unavailable" || !p[0].NextAttempt.Equal(next) {
			t.Fatalf("after retry %d: attempts %d error %q next %v", i, p[0].Attempts, p[0].LastError, p[0].NextAttempt)
		}
	}
	if err := s.Retry(ctx, "nope", "x", next); !errors.Is(err, ErrNotFound) {
		t.Errorf("Retry of unknown id: %v, want ErrNotFound", err)
	}
	// The old due entry is gone: only one entry per message.
	n := countKeys(t, s, bucketOutboxDue)
	if n != 1 {
		t.Errorf("outbox_due has %d entries, want 1", n)
	}
}

func TestDelivered(t *testing.T) {
	s, _ := open(t)
	for _, id := range []string{"m1", "m2"} {
		if err := s.Enqueue(ctx, msg(id, "t")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Delivered(ctx, "m1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delivered(ctx, "m1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delivered: %v, want ErrNotFound", err)
	}
	p, _ := s.Pending(ctx, 0)
	d, _ := s.Due(ctx, t0.Add(time.Hour), 0)
	if !slices.Equal(ids(p), []string{"m2"}) || !slices.Equal(ids(d), []string{"m2"}) {
		t.Errorf("pending %v due %v, want [m2]", ids(p), ids(d))
	}
	for _, b := range []string{bucketOutbox, bucketOutboxIDs, bucketOutboxDue} {
		if n := countKeys(t, s, b); n != 1 {
			t.Errorf("%s has %d entries, want 1", b, n)
		}
	}
	// Delivered records nothing in history.
	if n := countKeys(t, s, bucketHistory); n != 0 {
		t.Errorf("history has %d entries after Delivered", n)
	}
}

func TestReopenKeepsOutbox(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	s, err := Open(path, WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if err := s.Enqueue(ctx, msg(id, "t")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p, err := s.Pending(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ids(p), []string{"a", "b"}) {
		t.Errorf("after reopen pending %v, want [a b]", ids(p))
	}
	// Sequence numbers continue: a new message comes after the old ones.
	if err := s.Enqueue(ctx, msg("c", "t")); err != nil {
		t.Fatal(err)
	}
	p, _ = s.Pending(ctx, 0)
	if !slices.Equal(ids(p), []string{"a", "b", "c"}) {
		t.Errorf("pending %v, want [a b c]", ids(p))
	}
}

func TestClosed(t *testing.T) {
	s, err := Open(filepath.Join(t.TempDir(), "m.db"), WithLogger(testlog.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	calls := map[string]func() error{
		"Enqueue":   func() error { return s.Enqueue(ctx, msg("x", "t")) },
		"Pending":   func() error { _, err := s.Pending(ctx, 0); return err },
		"Due":       func() error { _, err := s.Due(ctx, t0, 0); return err },
		"Delivered": func() error { return s.Delivered(ctx, "x") },
		"Record":    func() error { return s.Record(ctx, msg("x", "t")) },
		"History":   func() error { _, err := s.History(ctx, HistoryQuery{}); return err },
		"Register":  func() error { return s.Register(ctx, Registration{AgentID: "a", Token: "t"}) },
		"Prune":     func() error { _, err := s.Prune(ctx, t0); return err },
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

func TestCanceledContext(t *testing.T) {
	s, _ := open(t)
	c, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.Enqueue(c, msg("x", "t")); !errors.Is(err, context.Canceled) {
		t.Errorf("Enqueue with a canceled context: %v", err)
	}
	if p, _ := s.Pending(ctx, 0); len(p) != 0 {
		t.Errorf("a canceled Enqueue wrote %v", ids(p))
	}
}

func TestErrorTextClipped(t *testing.T) {
	s, _ := open(t)
	if err := s.Enqueue(ctx, msg("m1", "t")); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", MaxErrorText-1) + "é" + strings.Repeat("y", 100)
	if err := s.Retry(ctx, "m1", long, t0); err != nil {
		t.Fatal(err)
	}
	p, _ := s.Pending(ctx, 0)
	if got := p[0].LastError; got != strings.Repeat("x", MaxErrorText-1) {
		t.Errorf("LastError is %d bytes ending %q, want cut before the split rune", len(got), got[len(got)-4:])
	}
	if err := s.DeadLetter(ctx, p[0], strings.Repeat("é", MaxErrorText)); err != nil {
		t.Fatal(err)
	}
	dl, _ := s.DeadLetters(ctx, DLQFilter{})
	if r := dl[0].Reason; len(r) != MaxErrorText || !utf8.ValidString(r) {
		t.Errorf("reason is %d bytes, valid UTF-8 %v", len(r), utf8.ValidString(r))
	}
	short := "agent_unavailable"
	if clip(short) != short {
		t.Error("a short text was changed")
	}
}

func TestOpenWarnsOnOpenPermissions(t *testing.T) {
	path := filepath.Join(t.TempDir(), "m.db")
	s, err := Open(path, WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	var buf strings.Builder
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	s, err = Open(path, WithPruneInterval(0), WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if !strings.Contains(buf.String(), "chmod 600") {
		t.Errorf("no warning about a world-readable file: %q", buf.String())
	}
}
