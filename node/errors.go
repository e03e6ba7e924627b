package node

import (
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
)

// ErrClosed is returned by operations on a node that has been closed.
var ErrClosed = errors.New("node: closed")

// ErrNoIdentity is returned by New when no identity key was given.
var ErrNoIdentity = errors.New("node: an identity key is required (WithIdentity)")

// ErrDeadLettered is returned by SendMessage when every attempt failed; the
// message is in the store's dead-letter queue when the node has a store.
var ErrDeadLettered = errors.New("node: message dead-lettered")

// ErrQueued is matched by the error SendMessage returns when the recipient
// could not be reached and the message waits in the node's outbox, on
// disk, to go out when it is back (a *QueuedError says until when).
var ErrQueued = errors.New("node: message queued")

// ErrOutboxFull is returned when the outbox holds as much as its bounds
// allow (WithOutboxBounds) for the recipient or in all: the message was
// not queued.
var ErrOutboxFull = errors.New("node: outbox full")

// ErrNoStore is returned by Forward on a node built without a store.
var ErrNoStore = errors.New("node: no store (WithStore): nothing can be queued")

// ErrNoTopics is returned by Publish and Subscribe on a node built without
// topics (WithTopics(false)).
var ErrNoTopics = errors.New("node: topics are off")

// ErrNoAudit is returned by Audit when the node keeps no audit log
// (WithAudit and WithStore): a CAPABILITY_NOT_SUPPORTED error, so that the
// local API answers it as it is.
var ErrNoAudit error = protocol.Errorf(protocol.CodeCapabilityNotSupported, "this node keeps no audit log (meshagent node --audit; node.WithAudit with a store)")

// ErrNoDirectory is returned by Discover on a node built without the DHT.
var ErrNoDirectory = errors.New("node: the capability directory (DHT) is off")

// errNoReceiver is what a handler's Progress returns when no requester
// waits for the task any longer.
var errNoReceiver = errors.New("node: no requester is waiting for this task")

// ListenError is returned by New when the node cannot listen on one of its
// addresses, most often because another process (or node) holds the port.
// A node never shares a port: SO_REUSEPORT is off, so a second node on the
// same address fails here instead of silently splitting connections.
type ListenError struct {
	// Addr is the address that could not be bound.
	Addr string
	// InUse reports that the address is held by another socket.
	InUse bool
	Err   error
}

// Error implements error.
func (e *ListenError) Error() string {
	if e.InUse {
		return fmt.Sprintf("node: cannot listen on %s: address already in use (another node or process holds it)", e.Addr)
	}
	return fmt.Sprintf("node: cannot listen on %s: %v", e.Addr, e.Err)
}

// Unwrap returns the underlying error.
func (e *ListenError) Unwrap() error { return e.Err }

// QueuedError is returned by SendMessage when the recipient is away and
// the message waits in the node's outbox, on disk. It matches ErrQueued;
// it unwraps to the failed attempt's error, so protocol.CodeOf names why
// (UNKNOWN_AGENT, CAPABILITY_NOT_SUPPORTED): check ErrQueued first.
type QueuedError struct {
	// MessageID is the id the message is queued under.
	MessageID string
	// To is the recipient's agent id.
	To string
	// Expires is when the outbox gives up and dead-letters it.
	Expires time.Time
	// Cause is why the attempt failed.
	Cause error
	// Mailbox, when set, is the relay holding the message in the agent's
	// mailbox: the outbox handed it over and no longer holds it.
	Mailbox peer.ID
	// MailboxErr, when set, is why the agent's mailboxes did not take it
	// (a full mailbox matches mailbox.ErrFull): it waits in the outbox.
	// One matching mailbox.ErrUnanswered may be in a mailbox all the same;
	// the outbox then only deposits it again.
	MailboxErr error
}

// Error implements error.
func (e *QueuedError) Error() string {
	if e.Mailbox != "" {
		return fmt.Sprintf("node: message %s for agent %s left in its mailbox on %s until %s: %v", e.MessageID, e.To, e.Mailbox, e.Expires.UTC().Format(time.RFC3339), e.Cause)
	}
	s := fmt.Sprintf("node: message %s queued for agent %s until %s: %v", e.MessageID, e.To, e.Expires.UTC().Format(time.RFC3339), e.Cause)
	if e.MailboxErr != nil {
		s += fmt.Sprintf(" (not left in its mailbox: %v)", e.MailboxErr)
	}
	return s
}

// Is reports whether target is ErrQueued.
func (e *QueuedError) Is(target error) bool { return target == ErrQueued }

// Unwrap returns the cause.
func (e *QueuedError) Unwrap() error { return e.Cause }

// NotKeptError is returned by SendMessage when the message had to be kept
// and could not be: the recipient was away and the outbox did not take it
// (Err matches ErrOutboxFull at the outbox's bounds, store.ErrWrite when
// the store cannot write: a full disk), or every attempt failed and its
// dead letter could not be stored. Nothing is queued. It matches what
// Cause and Err match, and reads as errors.Join(Cause, Err).
type NotKeptError struct {
	// Cause is why the message had to be kept: the failed attempt's error
	// (the recipient away), or ErrDeadLettered with the last attempt's.
	Cause error
	// Err is why it was not kept: the outbox's or the store's error.
	Err error
}

// Error implements error: Cause, then Err on the next line.
func (e *NotKeptError) Error() string { return e.Cause.Error() + "\n" + e.Err.Error() }

// Unwrap returns Cause and Err.
func (e *NotKeptError) Unwrap() []error { return []error{e.Cause, e.Err} }

// ErrCapabilityTaken is returned by Offer when another source already
// offers a capability of the same name.
var ErrCapabilityTaken = errors.New("node: capability offered by another source")
