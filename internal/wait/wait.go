package wait

import (
	"errors"
	"testing"
	"time"
)

// interval is how often a condition is re-checked.
const interval = 5 * time.Millisecond

// For waits until cond returns nil, failing tb with cond's last error if
// that has not happened within d.
func For(tb testing.TB, d time.Duration, cond func() error) {
	tb.Helper()
	if err := Until(d, cond); err != nil {
		tb.Fatalf("condition not met after %s: %v", d, err)
	}
}

// Until waits until cond returns nil and returns nil, or returns cond's last
// error once d has passed. Benchmarks and helpers that report failure
// their own way use it.
func Until(d time.Duration, cond func() error) error {
	err := cond()
	if err == nil {
		return nil
	}
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err = cond(); err == nil {
				return nil
			}
		case <-deadline.C:
			if err = cond(); err == nil {
				return nil
			}
			return err
		}
	}
}

// Holds checks that cond keeps returning nil for the whole of d, failing tb
// at the first error.
func Holds(tb testing.TB, d time.Duration, cond func() error) {
	tb.Helper()
	end := time.NewTimer(d)
	defer end.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		if err := cond(); err != nil {
			tb.Fatalf("condition stopped holding: %v", err)
		}
		select {
		case <-tick.C:
		case <-end.C:
			return
		}
	}
}

// ForTrue is For for a yes-or-no condition: what names it in the failure.
func ForTrue(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	For(tb, d, func() error {
		if !cond() {
			return errors.New("still waiting for " + what)
		}
		return nil
	})
}

// Receive returns the next value on ch, failing tb if none comes within d;
// what names the value in the failure.
func Receive[T any](tb testing.TB, d time.Duration, ch <-chan T, what string) T {
	tb.Helper()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case v := <-ch:
		return v
	case <-t.C:
		tb.Fatalf("timed out after %s waiting for %s", d, what)
		panic("unreachable")
	}
}
