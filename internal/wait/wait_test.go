package wait

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	var n atomic.Int32
	if err := Until(5*time.Second, func() error {
		if n.Add(1) < 3 {
			return errors.New("not yet")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := Until(50*time.Millisecond, func() error { return errors.New("never") })
	if err == nil || err.Error() != "never" {
		t.Fatalf("got %v, want the condition's last error", err)
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Fatalf("gave up after %s, before the deadline", el)
	}
}

func TestHolds(t *testing.T) {
	var n atomic.Int32
	Holds(t, 30*time.Millisecond, func() error { n.Add(1); return nil })
	if n.Load() < 2 {
		t.Fatalf("condition checked %d times", n.Load())
	}
}

func TestForTrue(t *testing.T) {
	var n atomic.Int32
	ForTrue(t, 5*time.Second, "the third check", func() bool { return n.Add(1) >= 3 })
	if n.Load() != 3 {
		t.Fatalf("condition checked %d times, want 3", n.Load())
	}
}

func TestReceive(t *testing.T) {
	ch := make(chan int)
	go func() { ch <- 7 }()
	if v := Receive(t, 5*time.Second, ch, "the value"); v != 7 {
		t.Fatalf("got %d, want 7", v)
	}
}
