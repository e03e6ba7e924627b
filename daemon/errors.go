package daemon

import (
	"errors"
	"fmt"
)

// ErrExchange wraps a file exchange directory (Config.ExchangeDir) that
// cannot be served.
var ErrExchange = errors.New("file exchange")

// What a ListenError's Listener names.
const (
	ListenerAPI     = "local API"
	ListenerPublic  = "relay"
	ListenerMetrics = "metrics listener"
)

// ListenError is a listener of the daemon that could not bind its
// address (in use, not local, no permission): the caller names its
// setting (cli: the flag) and what to do.
type ListenError struct {
	Listener string // ListenerAPI, ListenerPublic or ListenerMetrics
	Addr     string
	Err      error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("the %s cannot listen on %s: %v", e.Listener, e.Addr, e.Err)
}

func (e *ListenError) Unwrap() error { return e.Err }

// StoreError is a message store that could not be opened in the data
// directory (commonly: another process holds it).
type StoreError struct {
	Dir string
	Err error
}

func (e *StoreError) Error() string {
	return fmt.Sprintf("open the message store in %s: %v", e.Dir, e.Err)
}

func (e *StoreError) Unwrap() error { return e.Err }
