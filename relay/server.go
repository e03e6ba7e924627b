package relay

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// MethodFunc serves one JSON-RPC method. It runs on its own goroutine; ctx
// ends when the connection closes. Return an *Error to choose the code.
type MethodFunc func(ctx context.Context, c *Conn, params json.RawMessage) (any, error)

// Server is the JSON-RPC 2.0 over WebSocket endpoint.
type Server struct {
	cfg     Config
	log     *slog.Logger
	mesh    Mesh
	methods map[string]MethodFunc

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	nextID atomic.Uint64

	mu     sync.Mutex
	closed bool
	conns  map[*Conn]struct{}
	https  []*http.Server

	closeOnce sync.Once
}

// New returns a server exposing mesh through the mesh.* methods.
func New(mesh Mesh, opts ...Option) (*Server, error) {
	if mesh == nil {
		return nil, errors.New("relay: a Mesh is required")
	}
	cfg := Config{Limits: DefaultLimits()}
	if err := cfg.apply(opts...); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{
		cfg:     cfg,
		log:     log.With("component", "relay"),
		mesh:    mesh,
		methods: make(map[string]MethodFunc),
		ctx:     ctx,
		cancel:  cancel,
		conns:   make(map[*Conn]struct{}),
	}
	s.registerMeshMethods()
	return s, nil
}

// Handle registers a method, replacing any earlier one of that name. Call it
// before serving.
func (s *Server) Handle(method string, f MethodFunc) { s.methods[method] = f }

// Serve accepts connections on l until Close. It returns nil after Close.
func (s *Server) Serve(l net.Listener) error {
	hs := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = l.Close()
		return ErrClosed
	}
	s.https = append(s.https, hs)
	s.mu.Unlock()
	err := hs.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ServeHTTP upgrades a request at path "/" to a WebSocket connection.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: s.cfg.OriginPatterns})
	if err != nil {
		s.log.Debug("websocket upgrade refused", "remote_addr", r.RemoteAddr, "err", err)
		return
	}
	ws.SetReadLimit(s.cfg.Limits.MaxMessageBytes)
	c := s.newConn(ws, r.RemoteAddr)
	if c == nil {
		_ = ws.Close(websocket.StatusGoingAway, "server closing")
		return
	}
	// The HTTP handler goroutine becomes the read loop; it is tracked.
	defer s.wg.Done()
	c.run()
}

// Close stops accepting, disconnects every client, and waits for all
// goroutines. It is idempotent.
func (s *Server) Close() error {
	var errs []error
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		conns := make([]*Conn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		https := s.https
		s.mu.Unlock()
		for _, hs := range https {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if err := hs.Shutdown(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				errs = append(errs, err)
			}
			cancel()
			_ = hs.Close()
		}
		s.cancel()
		for _, c := range conns {
			c.close(websocket.StatusGoingAway, "server closing")
		}
		s.wg.Wait()
	})
	return errors.Join(errs...)
}

func (s *Server) newConn(ws *websocket.Conn, remote string) *Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	ctx, cancel := context.WithCancel(s.ctx)
	c := &Conn{
		id:     s.nextID.Add(1),
		srv:    s,
		ws:     ws,
		remote: remote,
		ctx:    ctx,
		cancel: cancel,
		send:   make(chan []byte, s.cfg.Limits.SendQueue),
		calls:  make(chan struct{}, s.cfg.Limits.MaxConcurrentCalls),
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1) // the read loop (ServeHTTP's goroutine)
	return c
}

func (s *Server) removeConn(c *Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// track adds one goroutine to the server's WaitGroup unless closing.
func (s *Server) track() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	return true
}

// Clients returns the number of connected clients.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

