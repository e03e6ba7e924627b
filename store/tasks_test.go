package store

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"
)

func task(id, requester, reqID string) TaskRecord {
	return TaskRecord{ID: id, Requester: requester, RequestID: reqID, Expires: t0.Add(7 * 24 * time.Hour), Data: json.RawMessage(`{"state":"APPROVED"}`)}
}

func TestAddTaskBounds(t *testing.T) {
	tests := []struct {
		name   string
		bounds TaskBounds
		add    []TaskRecord
		want   []error // per add
	}{
		{"per requester", TaskBounds{PerRequester: 2}, []TaskRecord{task("1", "a", "r1"), task("2", "a", "r2"), task("3", "a", "r3"), task("4", "b", "r1")},
			[]error{nil, nil, ErrFull, nil}},
		{"total", TaskBounds{Total: 2}, []TaskRecord{task("1", "a", "r1"), task("2", "b", "r1"), task("3", "c", "r1")},
			[]error{nil, nil, ErrFull}},
		{"bytes", TaskBounds{Bytes: 120}, []TaskRecord{task("1", "a", "r1"), task("2", "b", "r1")},
			[]error{nil, ErrFull}},
		{"same id", TaskBounds{}, []TaskRecord{task("1", "a", "r1"), task("1", "b", "r1")}, []error{nil, ErrExists}},
		{"same request", TaskBounds{}, []TaskRecord{task("1", "a", "r1"), task("2", "a", "r1")}, []error{nil, ErrExists}},
		{"bad data", TaskBounds{}, []TaskRecord{{ID: "1", Requester: "a", RequestID: "r", Expires: t0, Data: json.RawMessage(`{`)}}, []error{ErrInvalid}},
		{"nul requester", TaskBounds{}, []TaskRecord{task("1", "a\x00b", "r1")}, []error{ErrInvalid}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := open(t)
			for i, r := range tc.add {
				err := s.AddTask(ctx, r, tc.bounds)
				if (tc.want[i] == nil) != (err == nil) || (err != nil && !errors.Is(err, tc.want[i])) {
					t.Fatalf("add %d: err %v, want %v", i, err, tc.want[i])
				}
			}
		})
	}
}

func TestTaskSurvivesReopenAndExpires(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meshagent.db")
	clk := newClock()
	s, err := Open(path, WithClock(clk.Now), WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	r := task("1", "a", "r1")
	r.Expires = t0.Add(time.Hour)
	if err := s.AddTask(ctx, r, TaskBounds{}); err != nil {
		t.Fatal(err)
	}
	r.Final, r.Data = true, json.RawMessage(`{"state":"COMPLETED","result":[1,2,3]}`)
	if err := s.UpdateTask(ctx, r); err != nil {
		t.Fatal(err)
	}
	if err := s.UpdateTask(ctx, task("nope", "a", "r9")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("update of an unknown task: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, WithClock(clk.Now), WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.TaskByRequest(ctx, "a", "r1")
	if err != nil || got.ID != "1" || !got.Final || string(got.Data) != string(r.Data) || !got.Expires.Equal(r.Expires) {
		t.Fatalf("after reopen: %+v %v", got, err)
	}
	if n, size, err := s.TaskUsage(ctx); err != nil || n != 1 || size <= 0 {
		t.Fatalf("usage %d %d %v", n, size, err)
	}
	if n, err := s.PruneTasks(ctx, t0.Add(30*time.Minute)); err != nil || n != 0 {
		t.Fatalf("early prune: %d %v", n, err)
	}
	if n, err := s.PruneTasks(ctx, t0.Add(2*time.Hour)); err != nil || n != 1 {
		t.Fatalf("prune: %d %v", n, err)
	}
	if _, err := s.Task(ctx, "1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("expired task still there: %v", err)
	}
	if _, err := s.TaskByRequest(ctx, "a", "r1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("expired request still there: %v", err)
	}
	if n, size, err := s.TaskUsage(ctx); err != nil || n != 0 || size != 0 {
		t.Fatalf("usage after prune %d %d %v", n, size, err)
	}
}

func TestAddTaskForgetsExpiredFirst(t *testing.T) {
	s, clk := open(t)
	for i := range 3 {
		r := task(fmt.Sprint(i), "a", fmt.Sprint("r", i))
		r.Expires = t0.Add(time.Minute)
		if err := s.AddTask(ctx, r, TaskBounds{Total: 3}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AddTask(ctx, task("x", "a", "rx"), TaskBounds{Total: 3}); !errors.Is(err, ErrFull) {
		t.Fatalf("full store took a task: %v", err)
	}
	clk.Add(2 * time.Minute)
	if err := s.AddTask(ctx, task("x", "a", "rx"), TaskBounds{Total: 3}); err != nil {
		t.Fatalf("expired tasks were not forgotten: %v", err)
	}
	var n int
	if err := s.Tasks(ctx, func(TaskRecord) bool { n++; return true }); err != nil || n != 1 {
		t.Fatalf("tasks %d %v", n, err)
	}
}

// TestAddTaskPastShareForgetsOldestFinished: a requester at its share
// makes room by forgetting its own finished task that expires first,
// never a running one nor another requester's; with none finished it is
// refused.
func TestAddTaskPastShareForgetsOldestFinished(t *testing.T) {
	s, _ := open(t)
	b := TaskBounds{PerRequester: 3}
	at := func(id, requester string, final bool, exp time.Duration) TaskRecord {
		r := task(id, requester, "r"+id)
		r.Final, r.Expires = final, t0.Add(exp)
		return r
	}
	for _, r := range []TaskRecord{
		at("1", "a", false, time.Hour), // running, oldest: kept
		at("2", "a", true, 3*time.Hour),
		at("3", "a", true, 2*time.Hour), // finished, expires first: forgotten
		at("4", "b", true, time.Minute), // another requester's: kept
		at("5", "a", false, 4*time.Hour),
	} {
		if err := s.AddTask(ctx, r, b); err != nil {
			t.Fatalf("add %s: %v", r.ID, err)
		}
	}
	kept := func() string {
		var ids []string
		if err := s.Tasks(ctx, func(r TaskRecord) bool { ids = append(ids, r.ID); return true }); err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(ids)
	}
	if got := kept(); got != "[1 2 4 5]" {
		t.Fatalf("kept %s, want [1 2 4 5]", got)
	}
	if _, err := s.TaskByRequest(ctx, "a", "r3"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the forgotten task's request: %v, want ErrNotFound", err)
	}
	if err := s.AddTask(ctx, at("6", "a", false, 5*time.Hour), b); err != nil {
		t.Fatalf("add 6: %v", err)
	}
	if got := kept(); got != "[1 4 5 6]" {
		t.Fatalf("kept %s, want [1 4 5 6]", got)
	}
	if err := s.AddTask(ctx, at("7", "a", true, 6*time.Hour), b); !errors.Is(err, ErrFull) {
		t.Fatalf("a requester whose kept tasks all run: %v, want ErrFull", err)
	}
	if n, _, err := s.TaskUsage(ctx); err != nil || n != 4 {
		t.Fatalf("usage %d %v, want 4", n, err)
	}
}
