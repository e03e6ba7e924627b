package pubsub

import (
	"errors"

	"github.com/meshagent/meshagent/protocol"
)

var (
	// ErrNoPeers is protocol.ErrNoPeers: Publish found no receiver (topic
	// peer or own subscription) within its wait.
	ErrNoPeers = protocol.ErrNoPeers
	// ErrPattern is returned for a topic or pattern Subscribe or Publish
	// cannot serve (see the package doc).
	ErrPattern = errors.New("pubsub: invalid pattern")
	// ErrClosed is returned by operations on closed Topics.
	ErrClosed = errors.New("pubsub: closed")
	// ErrInvalidConfig is wrapped by the error New returns for an option
	// out of range.
	ErrInvalidConfig = errors.New("pubsub: invalid configuration")
)
