package bus

import "errors"

// ErrMissingPart is returned by New without a server or a mesh.
var ErrMissingPart = errors.New("bus: New needs a server and a mesh")

// errNoSubscriber is a retry routed afresh that found no subscriber.
var errNoSubscriber = errors.New("no subscriber")

// errNoMember is a delivery to a queue group that found no member
// connected.
var errNoMember = errors.New("no member of the queue group is connected")

// The refusals of subscribe, answered as JSON-RPC errors.
var (
	errAlreadySubscribed = errors.New("already subscribed")
	errGroupPolicy       = errors.New("propagation policy differs from the queue group's")
	errGroupBound        = errors.New("queue group bound reached")
)
