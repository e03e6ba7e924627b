package wsconn

import "errors"

var (
	// ErrClosed is returned by Conn.Send once the connection has started
	// closing.
	ErrClosed = errors.New("wsconn: connection closed")
	// ErrSlowConsumer is returned by Conn.Send when the send queue is
	// full; the client has been disconnected.
	ErrSlowConsumer = errors.New("wsconn: slow consumer disconnected")
)
