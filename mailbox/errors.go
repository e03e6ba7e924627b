package mailbox

import "errors"

var (
	// ErrFull is matched by the error a deposit gets when the recipient's
	// mailbox, or the relay, holds as much as its bounds allow: nothing
	// was stored.
	ErrFull = errors.New("mailbox: full")
	// ErrRefused is matched by the error a request gets when the relay
	// will never accept it: an envelope that does not verify, is not
	// addressed to the named agent, is too old or too large; a fetch or
	// ack of another agent's mailbox.
	ErrRefused = errors.New("mailbox: refused")
	// ErrFailed is matched by the error a request gets when the relay
	// failed to serve it (its store, say): it may succeed later.
	ErrFailed = errors.New("mailbox: relay failed")
	// ErrUnanswered is matched, along with ErrFailed, by the error a
	// request gets when it was sent (in part or whole) and no answer came
	// back that could be read: the relay may have done what was asked. A
	// deposit that fails so may be in the mailbox.
	ErrUnanswered = errors.New("mailbox: sent without an answer")
	// ErrNoStore is returned by NewServer without a store.
	ErrNoStore = errors.New("mailbox: a store is required")
)
