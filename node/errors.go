package node

import (
	"errors"
	"fmt"
)

// ErrClosed is returned by operations on a node that has been closed.
var ErrClosed = errors.New("node: closed")

// ErrNoIdentity is returned by New when no identity key was given.
var ErrNoIdentity = errors.New("node: an identity key is required (WithIdentity)")

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
