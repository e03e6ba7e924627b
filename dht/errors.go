package dht

import "errors"

// ErrInvalidConfig is wrapped by the errors New returns for a missing host
// or an option out of range.
var ErrInvalidConfig = errors.New("dht: invalid configuration")
