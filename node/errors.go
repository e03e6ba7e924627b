package node

import "errors"

// ErrClosed is returned by operations on a node that has been closed.
var ErrClosed = errors.New("node: closed")

// ErrNoIdentity is returned by New when no identity key was given.
var ErrNoIdentity = errors.New("node: an identity key is required (WithIdentity)")
