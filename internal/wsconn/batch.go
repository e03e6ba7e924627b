package wsconn

import (
	"net"
	"sync"
	"time"
)

// maxBatch bounds the bytes a BatchConn holds back: past it, what is held
// goes out at once, so a burst of large messages costs a write per
// maxBatch bytes rather than memory.
const maxBatch = 64 << 10

// BatchConn is a connection under a WebSocket library, which flushes
// once per frame: one write system call per message. While a writer
// sends a burst it calls Hold, which keeps those flushes back, and
// Release sends them in one write. Every frame stays a frame of its own on
// the wire: only the system calls are fewer. A Hub puts one under each
// connection it accepts; a client can put one under its dialled
// connection.
//
// Writes from other goroutines (a pong from the read loop, a ping from
// the pinger) that arrive while writes are held join the batch, in the
// order the library wrote them. Writes outside Hold go straight through.
//
// What is held goes out by the deadline given to Hold, which the
// connection's write deadline enforces: the burst's writer can hand the
// library a context without one, which spares it a timer per message.
type BatchConn struct {
	net.Conn

	mu       sync.Mutex
	holding  bool
	deadline time.Time // of the held burst
	buf      []byte
}

// Write sends p, or keeps it for Release while writes are held. While
// held, what goes out at once (past maxBatch) goes out by the burst's
// deadline.
func (c *BatchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.holding {
		return c.Conn.Write(p)
	}
	if len(c.buf)+len(p) <= maxBatch {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	if err := c.flushLocked(); err != nil {
		return 0, err
	}
	return c.writeByDeadline(p)
}

// Hold keeps writes back until Release; what is held must be written by
// deadline.
func (c *BatchConn) Hold(deadline time.Time) {
	c.mu.Lock()
	c.holding, c.deadline = true, deadline
	c.mu.Unlock()
}

// Release sends what was held back in one write and lets later writes
// through.
func (c *BatchConn) Release() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding = false
	return c.flushLocked()
}

// flushLocked writes out what is held, by the burst's deadline. A large
// buffer is not kept for the next burst: an idle connection should not
// pin it.
func (c *BatchConn) flushLocked() error {
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.writeByDeadline(c.buf)
	if cap(c.buf) > maxBatch {
		c.buf = nil
	} else {
		c.buf = c.buf[:0]
	}
	return err
}

// writeByDeadline writes b to the connection by the burst's deadline.
func (c *BatchConn) writeByDeadline(b []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(c.deadline); err != nil {
		return 0, err
	}
	n, err := c.Conn.Write(b)
	_ = c.Conn.SetWriteDeadline(time.Time{})
	return n, err
}
