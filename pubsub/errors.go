package pubsub

import (
	"errors"
	"fmt"

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
	// ErrInvalidQuery is wrapped by the errors of ParseHistoryQuery, and
	// by a fetch a keeper refused as invalid.
	ErrInvalidQuery = errors.New("pubsub: invalid history query")
	// ErrNoKeepers is wrapped by a history fetch that found no history
	// keeper for its pattern, or none that answered.
	ErrNoKeepers = errors.New("pubsub: no history keeper answered")
	// ErrDurable is wrapped by SubscribeDurable's refusals: no store of
	// positions, a name already in use on this node, a name that follows
	// another pattern, or one name too many (ErrTooManyDurables); and by
	// ForgetDurable's.
	ErrDurable = errors.New("pubsub: durable subscription refused")
	// ErrTooManyDurables wraps ErrDurable: the node keeps positions for as
	// many durable names as it may, and a new name needs one forgotten
	// first (ForgetDurable).
	ErrTooManyDurables = fmt.Errorf("%w: this node keeps positions for as many durable names as it may; forget one first", ErrDurable)
)
