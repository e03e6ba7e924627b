package store

import (
	"errors"
	"fmt"
)

var (
	// ErrNotFound is returned when the id, agent or token asked for is not
	// in the store.
	ErrNotFound = errors.New("store: not found")
	// ErrExists is returned when a record with the same id is already where
	// it would be written: an Enqueue of an id already in the outbox or the
	// dead-letter queue, a Replay of an id already in the outbox, or a
	// Register whose token is held by another agent.
	ErrExists = errors.New("store: already exists")
	// ErrClosed is returned by every method called after Close.
	ErrClosed = errors.New("store: closed")
	// ErrInvalid is returned for input the store refuses to write: an empty
	// topic, a payload that is not JSON, a NUL byte in an indexed field, a
	// time outside the representable range. The wrapping error says which.
	ErrInvalid = errors.New("store: invalid record")
	// ErrTooLarge is returned when a record's payload and metadata together
	// exceed the maximum record size (see WithMaxRecordSize).
	ErrTooLarge = errors.New("store: record too large")
	// ErrFull is returned by EnqueueWithin when the message would take its
	// queue past its bounds; nothing is written.
	ErrFull = errors.New("store: queue full")
	// ErrWrite is matched by the error of a write the store could not
	// commit to its file (no space left on device, an I/O error): nothing
	// of that write is kept, and the same write may succeed once the cause
	// is gone. A write refused for what it holds (ErrFull, ErrExists,
	// ErrInvalid, …) does not match it.
	ErrWrite = errors.New("store: write not committed")
	// ErrCorrupt is matched (with errors.Is) by every *CorruptError.
	ErrCorrupt = errors.New("store: corrupt record")
	// ErrInvalidConfig is wrapped by the error Open returns for an option
	// out of range.
	ErrInvalidConfig = errors.New("store: invalid configuration")
)

// CorruptError is returned when a stored value or key cannot be decoded.
// The store never panics on such data; it names where the bad bytes are so
// that an operator can inspect them (for example with `bbolt get`).
type CorruptError struct {
	// Bucket is the bbolt bucket holding the bad entry.
	Bucket string
	// Key is the entry's key, as stored.
	Key []byte
	// Err says what was wrong.
	Err error
}

var _ error = (*CorruptError)(nil)

// Error implements error.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("store: corrupt record in bucket %q at key %x: %v", e.Bucket, e.Key, e.Err)
}

// Unwrap returns the underlying decoding error.
func (e *CorruptError) Unwrap() error { return e.Err }

// Is reports whether target is ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
