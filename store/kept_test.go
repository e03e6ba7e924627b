package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func keepN(t *testing.T, s *Store, stream string, n int, at func(i int) time.Time) {
	t.Helper()
	for i := range n {
		m := KeptMessage{Stream: stream, Topic: fmt.Sprintf("%s:%d", stream, i%2), Key: fmt.Sprintf("k%03d", i), Time: at(i), Data: []byte(fmt.Sprintf("data %d", i))}
		if ok, err := s.Keep(context.Background(), m); err != nil || !ok {
			t.Fatalf("Keep %d: %v %v", i, ok, err)
		}
	}
}

func TestKeptPagesInOrder(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	// Kept out of order; read back by time, then key.
	keepN(t, s, "news", 10, func(i int) time.Time { return t0.Add(time.Duration(9-i/2) * time.Second) })
	keepN(t, s, "other", 3, func(i int) time.Time { return t0 })
	if ok, err := s.Keep(ctx, KeptMessage{Stream: "news", Topic: "news:0", Key: "k000", Time: t0.Add(9 * time.Second), Data: []byte("again")}); err != nil || ok {
		t.Fatalf("Keep of a kept message: %v %v, want false nil", ok, err)
	}
	var got []string
	q := KeptQuery{Stream: "news", Limit: 3}
	for pages := 0; ; pages++ {
		p, err := s.Kept(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range p.Messages {
			got = append(got, m.Key)
		}
		if p.Next == "" {
			break
		}
		if pages > 10 {
			t.Fatal("paging does not end")
		}
		q.After = p.Next
	}
	want := "k008 k009 k006 k007 k004 k005 k002 k003 k000 k001"
	if strings.Join(got, " ") != want {
		t.Errorf("order %v, want %s", got, want)
	}
	p, err := s.Kept(ctx, KeptQuery{Stream: "news", Since: t0.Add(7 * time.Second), Until: t0.Add(9 * time.Second), Match: func(topic string) bool { return topic == "news:1" }})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Messages) != 2 || p.Messages[0].Key != "k005" || p.Messages[1].Key != "k003" || string(p.Messages[1].Data) != "data 3" || !p.Messages[1].Time.Equal(t0.Add(8*time.Second)) {
		t.Errorf("range and match: %+v", p.Messages)
	}
	if _, err := s.Kept(ctx, KeptQuery{Stream: "news", After: "zz"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad cursor: %v, want ErrInvalid", err)
	}
}

func TestKeptBounds(t *testing.T) {
	s, clk := open(t, WithMaxKeptBytes(600), WithKeptRetention(time.Hour))
	ctx := context.Background()
	keepN(t, s, "news", 20, func(i int) time.Time { return t0.Add(time.Duration(i) * time.Minute) })
	p, err := s.Kept(ctx, KeptQuery{Stream: "news"})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.Messages); n == 0 || n >= 20 || p.Messages[n-1].Key != "k019" {
		t.Fatalf("size bound kept %d messages, want the newest few", n)
	}
	clk.Set(t0.Add(19*time.Minute + time.Hour))
	if _, err := s.PruneKept(ctx, clk.Now()); err != nil {
		t.Fatal(err)
	}
	p, err = s.Kept(ctx, KeptQuery{Stream: "news"})
	if err != nil || len(p.Messages) != 1 || p.Messages[0].Key != "k019" {
		t.Fatalf("after pruning: %+v %v, want k019 alone", p.Messages, err)
	}
}

func TestDurablePosition(t *testing.T) {
	s, _ := open(t)
	ctx := context.Background()
	if _, err := s.Durable(ctx, "reader"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Durable before SaveDurable: %v, want ErrNotFound", err)
	}
	for _, v := range []string{"one", "two"} {
		if err := s.SaveDurable(ctx, "reader", []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := s.Durable(ctx, "reader"); err != nil || string(v) != "two" {
		t.Fatalf("Durable = %q %v, want two", v, err)
	}
}

// TestDurableNamesBounded: past WithMaxDurables names a new name is
// refused as full, names already kept still save, and DeleteDurable makes
// room.
func TestDurableNamesBounded(t *testing.T) {
	s, _ := open(t, WithMaxDurables(3))
	ctx := context.Background()
	for i := range 3 {
		if err := s.SaveDurable(ctx, fmt.Sprint("n", i), []byte("p")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SaveDurable(ctx, "n3", []byte("p")); !errors.Is(err, ErrFull) {
		t.Fatalf("a fourth name: %v, want ErrFull", err)
	}
	if err := s.SaveDurable(ctx, "n1", []byte("moved")); err != nil {
		t.Fatalf("a kept name at the limit: %v", err)
	}
	if err := s.DeleteDurable(ctx, "n0"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteDurable(ctx, "n0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleted twice: %v, want ErrNotFound", err)
	}
	if _, err := s.Durable(ctx, "n0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a deleted name: %v, want ErrNotFound", err)
	}
	if err := s.SaveDurable(ctx, "n3", []byte("p")); err != nil {
		t.Fatalf("after a delete: %v", err)
	}
}
