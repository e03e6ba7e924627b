package beadctx

import "errors"

// Errors a caller branches on. Each is wrapped with the detail.
var (
	// ErrInvalid marks a patch, bead id or value that is not well formed.
	ErrInvalid = errors.New("beadctx: invalid")
	// ErrTooLarge marks a patch or document past its byte bound.
	ErrTooLarge = errors.New("beadctx: too large")
	// ErrTooLate marks a patch older than the oldest state a document
	// keeps (see the package doc, Bounds).
	ErrTooLate = errors.New("beadctx: patch older than the history kept")
	// ErrNotMember marks a patch by an agent that is not a member of the
	// bead (see the package doc, Members).
	ErrNotMember = errors.New("beadctx: not a member of the bead")
)
