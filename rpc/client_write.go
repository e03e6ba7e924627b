package rpc

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"runtime"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/internal/wsconn"
)

// clientWriter is a Client's one writer at a time, with group commit:
// the goroutine that finds nobody writing writes what is queued, its own
// message and every one queued while it wrote, holding the flushes back
// so that a burst (the answers to many requests served at once) goes out
// in one system call. Every message stays a WebSocket message of its own.
type clientWriter struct {
	batch *wsconn.BatchConn // under the WebSocket; nil if the dial gave none

	mu      sync.Mutex
	queue   []*queuedWrite
	spare   []*queuedWrite // the last burst's slice, emptied, for the next queue; the writer's
	writing bool
}

// queuedWrite is one message waiting for the writer.
type queuedWrite struct {
	b     []byte
	taken bool       // the writer has it: it will be written, ctx or not
	done  chan error // the outcome, once taken and written
}

// queuedWrites keeps queuedWrites, each with its channel, between
// writes: a busy client writes one per message it sends or answers.
// write puts one back once nobody else holds it: it was never taken, or
// its outcome has been received (the writer touches it no more after
// sending that).
var queuedWrites = sync.Pool{New: func() any { return &queuedWrite{done: make(chan error, 1)} }}

// result receives q's outcome and gives q back to queuedWrites.
func (q *queuedWrite) result() error {
	err := <-q.done
	q.release()
	return err
}

// release gives q back to queuedWrites; nobody else may hold it.
func (q *queuedWrite) release() {
	q.b, q.taken = nil, false
	queuedWrites.Put(q)
}

// write sends one message. The caller's ctx bounds the wait for the
// writer only: a write cancelled half way would drop the connection, so
// once the message is being written it finishes, bounded by
// WriteTimeout. It returns once the message is written, so messages a
// goroutine writes one after another reach the server in that order.
func (c *Client) write(ctx context.Context, b []byte) error {
	if c.ctx.Err() != nil {
		return c.Err()
	}
	w := &c.writer
	q := queuedWrites.Get().(*queuedWrite)
	q.b = b
	w.mu.Lock()
	w.queue = append(w.queue, q)
	if !w.writing {
		w.writing = true
		w.mu.Unlock()
		// The answers to requests served at once are often about to be
		// queued too: let them join this burst.
		runtime.Gosched()
		c.writeQueued()
		return q.result()
	}
	w.mu.Unlock()
	select {
	case err := <-q.done:
		q.release()
		return err
	case <-ctx.Done():
	case <-c.ctx.Done():
	}
	w.mu.Lock()
	if !q.taken {
		for i, o := range w.queue {
			if o == q {
				w.queue = append(w.queue[:i], w.queue[i+1:]...)
				break
			}
		}
		w.mu.Unlock()
		q.release()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return c.Err()
	}
	w.mu.Unlock()
	return q.result()
}

// writeQueued writes the queue, burst by burst, until it is empty, then
// gives up the writer. The caller has set writing.
func (c *Client) writeQueued() {
	w := &c.writer
	for {
		w.mu.Lock()
		burst := w.queue
		if len(burst) == 0 {
			w.writing = false
			w.mu.Unlock()
			return
		}
		// Only the writer touches spare.
		w.queue, w.spare = w.spare, nil
		for _, q := range burst {
			q.taken = true
		}
		w.mu.Unlock()
		err := c.writeBurst(burst)
		for _, q := range burst {
			q.done <- err
		}
		clear(burst) // its writes go back to the pool once their writers have the outcome
		w.spare = burst[:0]
	}
}

// writeBurst writes every message of burst within one WriteTimeout.
func (c *Client) writeBurst(burst []*queuedWrite) error {
	if c.ctx.Err() != nil {
		return c.Err()
	}
	// Under a BatchConn the connection's write deadline bounds the burst,
	// and the library needs no context of its own (a timer per message).
	deadline := time.Now().Add(c.cfg.WriteTimeout)
	wctx := context.Background()
	b := c.writer.batch
	if b != nil {
		b.Hold(deadline)
	} else {
		var cancel context.CancelFunc
		wctx, cancel = context.WithDeadline(wctx, deadline)
		defer cancel()
	}
	var err error
	for _, q := range burst {
		if err = c.ws.Write(wctx, websocket.MessageText, q.b); err != nil {
			break
		}
	}
	if b != nil {
		if rerr := b.Release(); err == nil {
			err = rerr
		}
	}
	if err != nil {
		c.fail(err)
		return c.Err()
	}
	return nil
}

// batchingTransport is the HTTP transport a Client dials with: HTTP/1.1
// (a WebSocket upgrade), the proxy from the environment, tlsConfig for
// wss (nil: the defaults), and a BatchConn under the connection, which
// it stores in *batch.
func batchingTransport(tlsConfig *tls.Config, batch **wsconn.BatchConn) *http.Transport {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:           http.ProxyFromEnvironment,
		TLSClientConfig: tlsConfig,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			*batch = &wsconn.BatchConn{Conn: conn}
			return *batch, nil
		},
	}
}
