package bus

import "errors"

// ErrMissingPart is returned by New without a server or a mesh.
var ErrMissingPart = errors.New("bus: New needs a server and a mesh")

// errNoSubscriber is a retry routed afresh that found no subscriber.
var errNoSubscriber = errors.New("no subscriber")
