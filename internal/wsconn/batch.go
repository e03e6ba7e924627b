package wsconn

import (
	"net"
	"sync"
	"time"
)

// maxBatch bounds the bytes a batchConn holds back: past it, what is held
// goes out at once, so a burst of large messages costs a write per
// maxBatch bytes rather than memory.
const maxBatch = 64 << 10

// batchConn is the hijacked connection under the WebSocket library. The
// library flushes once per frame, which is one write system call per
// message; while the writer drains a burst from the send queue it holds
// those flushes back, and release sends them in one write. Every frame
// stays a frame of its own on the wire: only the system calls are fewer.
//
// Writes from other goroutines (a pong from the read loop, a ping from
// the pinger) that arrive while writes are held join the batch, in the
// order the library wrote them.
type batchConn struct {
	net.Conn

	mu      sync.Mutex
	holding bool
	buf     []byte
}

// Write sends p, or keeps it for release while writes are held.
func (c *batchConn) Write(p []byte) (int, error) {
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

// hold keeps writes back until release.
func (c *batchConn) hold() {
	c.mu.Lock()
	c.holding = true
	c.mu.Unlock()
}

// release sends what was held back in one write, which must finish by
// deadline, and lets later writes through.
func (c *batchConn) release(deadline time.Time) error {
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
func (c *batchConn) flushLocked() error {
	_, err := c.Conn.Write(c.buf)
	if cap(c.buf) > maxBatch {
		c.buf = nil
	} else {
		c.buf = c.buf[:0]
	}
	return err
}
