package store

import (
	"regexp"
	"testing"
	"time"
)

// TestNewID: ids keep the 32-hex-digit form, sort by the millisecond they
// were made in, and differ within one millisecond.
func TestNewID(t *testing.T) {
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	at := time.Date(2026, 11, 25, 15, 0, 0, 0, time.UTC)
	seen := map[string]bool{}
	prev := ""
	for i := range 1000 {
		id := newIDAt(at.Add(time.Duration(i/10) * time.Millisecond))
		if !hex32.MatchString(id) {
			t.Fatalf("id %q is not 32 lowercase hex digits", id)
		}
		if seen[id] {
			t.Fatalf("id %q made twice", id)
		}
		seen[id] = true
		if i%10 == 0 && id <= prev {
			t.Fatalf("id %q of a later millisecond sorts before %q", id, prev)
		}
		prev = id
	}
	if id := NewID(); !hex32.MatchString(id) {
		t.Fatalf("NewID() = %q", id)
	}
}
