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
type BatchConn struct {
	net.Conn

	mu      sync.Mutex
	holding bool
	buf     []byte
}

// Write sends p, or keeps it for Release while writes are held.
func (c *BatchConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.holding {
		if len(c.buf)+len(p) <= maxBatch {
			c.buf = append(c.buf, p...)
			return len(p), nil
		}
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return c.Conn.Write(p)
}

// Hold keeps writes back until Release.
func (c *BatchConn) Hold() {
	c.mu.Lock()
	c.holding = true
	c.mu.Unlock()
}

// Release sends what was held back in one write, which must finish by
// deadline, and lets later writes through.
func (c *BatchConn) Release(deadline time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holding = false
	if len(c.buf) == 0 {
		return nil
	}
	if err := c.Conn.SetWriteDeadline(deadline); err != nil {
		c.buf = c.buf[:0]
		return err
	}
	err := c.flushLocked()
	_ = c.Conn.SetWriteDeadline(time.Time{})
	return err
}

// flushLocked writes out what is held. A large buffer is not kept for
// the next burst: an idle connection should not pin it.
func (c *BatchConn) flushLocked() error {
	_, err := c.Conn.Write(c.buf)
	if cap(c.buf) > maxBatch {
		c.buf = nil
	} else {
		c.buf = c.buf[:0]
	}
	return err
}
