package wsconn

import (
	"bufio"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"

	"github.com/coder/websocket"
)

// Handler receives one connection's messages and its end.
type Handler struct {
	// Frame serves one WebSocket message, on the read loop: the next
	// message is not read until it returns, so work that waits goes to
	// Conn.Go. Required.
	Frame func(frame []byte)
	// Ended runs once, on the read loop, after the connection has ended
	// and every goroutine it started has returned; the connection's slot
	// is given back after it. Optional.
	Ended func()
}

// Hub is one listener's set of WebSocket connections: it admits them,
// serves each on the goroutine of its HTTP request, and closes them all
// on Close. It is safe for concurrent use.
type Hub struct {
	cfg Config

	// mu guards the fields below and every ticket. wg.Add happens only
	// under mu while closed is false, so it never races with Close's
	// wg.Wait.
	mu     sync.Mutex
	closed bool
	conns  map[*Conn]struct{}
	admit  *admission
	nextID uint64
	wg     sync.WaitGroup // read loops
	once   sync.Once
}

// NewHub returns a Hub with cfg, which it validates.
func NewHub(cfg Config) (*Hub, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Hub{cfg: cfg, conns: make(map[*Conn]struct{}), admit: newAdmission(cfg.Limits)}, nil
}

// Serve checks r's origin, reserves a slot, upgrades r to a WebSocket and
// serves it until the connection ends and every goroutine it started has
// returned. newHandler is called once the upgrade is done, before the
// first message is read, and returns the connection's Handler. A refused
// request is answered with an HTTP error: 403 for an origin not allowed,
// 429 or 503 when the admission rules refuse it (or 503 after Close).
func (h *Hub) Serve(w http.ResponseWriter, r *http.Request, newHandler func(*Conn) Handler) {
	log := h.cfg.Logger
	if !OriginAllowed(h.cfg.OriginPatterns, r) && !(h.cfg.LoopbackPages && SameLoopbackOrigin(r)) {
		log.Debug("websocket origin refused", "remote_addr", r.RemoteAddr, "origin", r.Header.Get("Origin"))
		http.Error(w, h.cfg.ErrorPrefix+": origin not allowed", http.StatusForbidden)
		return
	}
	c, status := h.admitConn(r.RemoteAddr)
	if c == nil {
		http.Error(w, h.cfg.ErrorPrefix+": "+http.StatusText(status), status)
		return
	}
	defer h.wg.Done() // admitConn added this goroutine
	rec := &hijackRecorder{ResponseWriter: w}
	ws, err := websocket.Accept(rec, r, &websocket.AcceptOptions{
		InsecureSkipVerify: true, // origins were checked above
		CompressionMode:    websocket.CompressionDisabled,
	})
	if err != nil {
		log.Debug("websocket upgrade failed", "remote_addr", r.RemoteAddr, "err", err)
		c.cancel()
		h.remove(c)
		return
	}
	ws.SetReadLimit(h.cfg.Limits.MaxMessageBytes)
	c.ws, c.netConn, c.batch = ws, rec.conn, rec.batch
	c.handler = newHandler(c)
	c.log.Debug("client connected")
	// If Close ran during the upgrade, c is already closing: serve starts
	// the writer, which says goodbye at once.
	c.serve()
	h.remove(c)
	c.log.Debug("client disconnected")
}

// admitConn reserves a slot and registers the caller's goroutine with
// the Hub's WaitGroup. It returns nil and an HTTP status if the Hub is
// closed or the admission rules refuse the connection.
func (h *Hub) admitConn(remote string) (*Conn, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, http.StatusServiceUnavailable
	}
	c := newConn(h, h.nextID+1, remote)
	t, status := h.admit.take(remote, c.evict)
	if t == nil {
		c.cancel()
		h.cfg.Logger.Warn("client refused: every slot holds an established client", "remote_addr", remote,
			"status", status, "max", h.cfg.Limits.MaxClients, "max_per_ip", h.cfg.Limits.MaxClientsPerIP)
		return nil, status
	}
	h.nextID++
	c.ticket = t
	h.conns[c] = struct{}{}
	h.wg.Add(1)
	return c, 0
}

// remove gives c's slot back.
func (h *Hub) remove(c *Conn) {
	h.mu.Lock()
	delete(h.conns, c)
	h.admit.release(c.ticket)
	h.mu.Unlock()
}

// establish takes c out of the connections evicted to make room.
func (h *Hub) establish(c *Conn) {
	h.mu.Lock()
	h.admit.establish(c.ticket)
	h.mu.Unlock()
}

// Len returns the number of connections holding a slot, including the
// ones being torn down.
func (h *Hub) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.conns)
}

// Close refuses new connections, closes every connection with status 1001
// and reason, and waits until every read loop has returned (each
// connection's close is bounded by Limits.WriteTimeout). Later calls do
// nothing.
func (h *Hub) Close(reason string) {
	h.once.Do(func() {
		h.mu.Lock()
		h.closed = true // from here on admitConn refuses, so conns only shrinks
		conns := slices.Collect(maps.Keys(h.conns))
		h.mu.Unlock()
		for _, c := range conns {
			c.Close(websocket.StatusGoingAway, reason)
		}
		h.wg.Wait()
	})
}

// hijackRecorder keeps the raw connection the WebSocket library takes
// over, so that a closing handshake with a client that does not answer
// can be cut short, and gives the library a BatchConn over it, so that
// the writer can send a burst of messages in one write.
type hijackRecorder struct {
	http.ResponseWriter
	conn  net.Conn
	batch *BatchConn
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return conn, rw, err
	}
	h.conn = conn
	h.batch = &BatchConn{Conn: conn}
	if err := rw.Writer.Flush(); err != nil {
		return conn, rw, err
	}
	rw.Writer.Reset(h.batch)
	return h.batch, rw, nil
}

func (h *hijackRecorder) Unwrap() http.ResponseWriter { return h.ResponseWriter }
