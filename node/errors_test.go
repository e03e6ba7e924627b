package node

import (
	"errors"
	"fmt"
	"testing"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// TestNotKeptError: a *NotKeptError reads as errors.Join of its cause and
// its error, matches what each matches, and is found with errors.As
// through a wrap, so callers branch on it instead of splitting a join.
func TestNotKeptError(t *testing.T) {
	away := protocol.Errorf(protocol.CodeUnknownAgent, "agent x is not connected")
	write := fmt.Errorf("node: outbox: %w", store.ErrWrite)
	full := fmt.Errorf("%w: 10 entries", ErrOutboxFull)
	dead := fmt.Errorf("%w (%v)", ErrDeadLettered, away)
	for _, tc := range []struct {
		name       string
		cause, err error
		is         []error
		isNot      []error
	}{
		{"store cannot write", away, write, []error{store.ErrWrite}, []error{ErrOutboxFull, ErrDeadLettered, ErrQueued}},
		{"outbox full", away, full, []error{ErrOutboxFull}, []error{store.ErrWrite, ErrQueued}},
		{"dead letter not stored", dead, fmt.Errorf("store the dead letter: %w", store.ErrWrite), []error{ErrDeadLettered, store.ErrWrite}, []error{ErrOutboxFull}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &NotKeptError{Cause: tc.cause, Err: tc.err}
			if got, want := e.Error(), errors.Join(tc.cause, tc.err).Error(); got != want {
				t.Errorf("Error() = %q, want %q", got, want)
			}
			for _, target := range tc.is {
				if !errors.Is(e, target) {
					t.Errorf("does not match %v", target)
				}
			}
			for _, target := range tc.isNot {
				if errors.Is(e, target) {
					t.Errorf("matches %v", target)
				}
			}
			if protocol.CodeOf(e) != protocol.CodeOf(tc.cause) {
				t.Errorf("code %q, want the cause's %q", protocol.CodeOf(e), protocol.CodeOf(tc.cause))
			}
			got, ok := errors.AsType[*NotKeptError](fmt.Errorf("send: %w", e))
			if !ok || got.Err != tc.err || got.Cause != tc.cause {
				t.Errorf("errors.As through a wrap = %v, %v", got, ok)
			}
		})
	}
}
