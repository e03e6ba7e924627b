package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/meshagent/meshagent/internal/wsconn"
)

// Server is the JSON-RPC 2.0 over WebSocket endpoint. It is an
// http.Handler (the API answers at path "/"), and can also run its own
// listener with Serve, Start or ListenAndServe. It is safe for concurrent
// use.
type Server struct {
	cfg  Config
	log  *slog.Logger
	mesh Mesh

	hmu      sync.RWMutex
	handlers map[string]HandlerFunc
	public   map[string]bool // methods a public listener serves to anyone
	local    map[string]bool // methods a public listener never serves (HandleLocal)
	inlined  map[string]bool // notifications served on the read loop (handleInline)
	onStatus []func(*StatusResult)
	caps     BusCapabilities // what initialize announces

	hub *wsconn.Hub // admission, and every connection's socket and goroutines

	serving *serveTable // nil without a Provider

	// mu guards the fields below. wg.Add happens only under mu while
	// closed is false, so it never races with Close's wg.Wait.
	mu        sync.Mutex
	closed    bool
	conns     map[*Conn]struct{}
	clientIDs map[string]*Conn // initialized bus clients, by clientId
	servers   []*http.Server
	addr      net.Addr
	wg        sync.WaitGroup // Start's serve loops
	closeOnce sync.Once
}

// New returns a server exposing mesh through the mesh.* methods, and
// what opts state beyond it (WithTopics, WithDurables, WithAnyCaller,
// WithProvider, WithControl): nothing is found from mesh's type. It does
// not listen; mount it as an http.Handler or call Serve, Start or
// ListenAndServe.
func New(mesh Mesh, opts ...Option) (*Server, error) {
	if mesh == nil {
		return nil, errors.New("rpc: a Mesh is required")
	}
	cfg := DefaultConfig()
	if err := cfg.Apply(opts...); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The component name is the caller's: the same server is a node's
	// local API ("api") and a relay's public listener ("relay").
	log := cfg.Logger
	hub, err := wsconn.NewHub(cfg.hubConfig(log, "initialize deadline: no initialize within %v"))
	if err != nil {
		return nil, fmt.Errorf("rpc: %w", err)
	}
	s := &Server{
		cfg:       cfg,
		log:       log,
		mesh:      mesh,
		handlers:  make(map[string]HandlerFunc),
		public:    map[string]bool{MethodInitialize: true, MethodPing: true},
		local:     map[string]bool{},
		hub:       hub,
		conns:     make(map[*Conn]struct{}),
		clientIDs: make(map[string]*Conn),
	}
	s.Handle(MethodInitialize, s.initialize)
	s.registerMeshMethods()
	return s, nil
}

// Handle registers the handler for a method, replacing any earlier one.
// It may be called at any time; requests already dispatched keep the
// handler they found.
func (s *Server) Handle(method string, h HandlerFunc) {
	if method == "" || h == nil {
		panic("rpc: Handle needs a method name and a handler")
	}
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.handlers[method] = h
}

// Methods returns the names of the methods registered on the server,
// sorted: what it serves on its local API (a public listener serves
// fewer, see HandlePublic and HandleLocal). Notifications served inline
// count as methods too.
func (s *Server) Methods() []string {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	return slices.Sorted(maps.Keys(s.handlers))
}

// HandlePublic is Handle for a method that a public listener (see
// PublicHandler) serves to anyone, anonymous clients included, rather
// than only to credentials that grant it. Like every method but
// initialize, it is served only after initialize.
func (s *Server) HandlePublic(method string, h HandlerFunc) {
	s.Handle(method, h)
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.public[method] = true
}

// HandleLocal is Handle for an operator's method (mesh.status,
// mesh.connect, …): served on the node's local API only, and answered
// -32601 on a public listener whatever a credential grants, even where
// that listener shares this server with the local API.
func (s *Server) HandleLocal(method string, h HandlerFunc) {
	s.Handle(method, h)
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.local[method] = true
}

// handleInline registers h for a notification that is served on the
// connection's read loop, in order with the frames around it, rather than
// on a goroutine of its own. h must not block. A request (with an id) of
// that method is served as usual.
func (s *Server) handleInline(method string, h HandlerFunc) {
	s.Handle(method, h)
	s.hmu.Lock()
	defer s.hmu.Unlock()
	if s.inlined == nil {
		s.inlined = map[string]bool{}
	}
	s.inlined[method] = true
}

func (s *Server) inline(method string) bool {
	s.hmu.RLock()
	defer s.hmu.RUnlock()
	return s.inlined[method]
}

// OnStatus registers f to add to mesh.status's result (the bus reports
// its subscriptions with it). f runs on the request's goroutine and must
// not block.
func (s *Server) OnStatus(f func(*StatusResult)) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.onStatus = append(s.onStatus, f)
}

// SetCapabilities sets what initialize announces (the bus announces
// itself). Default: nothing.
func (s *Server) SetCapabilities(c BusCapabilities) {
	s.hmu.Lock()
	defer s.hmu.Unlock()
	s.caps = c
}

// Now returns the time by the server's clock (Config.Clock).
func (s *Server) Now() time.Time { return s.cfg.Clock() }

// handler returns the handler of a method, behind the rules of the
// connection's listener (allow), or nil.
func (s *Server) handler(method string) HandlerFunc {
	s.hmu.RLock()
	h := s.handlers[method]
	s.hmu.RUnlock()
	if h == nil {
		return nil
	}
	return func(ctx context.Context, r *Request) (any, error) {
		if err := s.allow(r); err != nil {
			return nil, err
		}
		return h(ctx, r)
	}
}

// Serve accepts HTTP connections on l and serves the API on them until
// Close. It always returns a non-nil error: ErrServerClosed after Close.
func (s *Server) Serve(l net.Listener) error {
	hs := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = l.Close()
		return ErrServerClosed
	}
	s.servers = append(s.servers, hs)
	if s.addr == nil {
		s.addr = l.Addr()
	}
	s.mu.Unlock()
	s.log.Info("listening", "addr", l.Addr().String())
	err := hs.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return ErrServerClosed
	}
	return fmt.Errorf("rpc: serve %s: %w", l.Addr(), err)
}

// ListenAndServe listens on the TCP address addr and calls Serve.
func (s *Server) ListenAndServe(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("rpc: listen %s: %w", addr, err)
	}
	return s.Serve(l)
}

// Start listens on the TCP address addr (port 0 picks one; see Addr) and
// serves in the background until Close. It returns once listening, with
// the listen error if any. An error that stops serving later is logged.
func (s *Server) Start(addr string) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("rpc: listen %s: %w", addr, err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		_ = l.Close()
		return ErrServerClosed
	}
	if s.addr == nil {
		s.addr = l.Addr()
	}
	s.wg.Go(func() {
		if err := s.Serve(l); !errors.Is(err, ErrServerClosed) {
			s.log.Error("serving stopped", "err", err)
		}
	})
	s.mu.Unlock()
	return nil
}

// Addr returns the address of the first listener given to Serve or opened
// by Start or ListenAndServe, or nil if there is none yet.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// URL returns the WebSocket URL of Addr ("ws://127.0.0.1:7892/"), or ""
// if the server has no listener.
func (s *Server) URL() string {
	a := s.Addr()
	if a == nil {
		return ""
	}
	return "ws://" + a.String() + "/"
}

// ServeHTTP serves the API at path "/" by upgrading to WebSocket, with
// every method, as the loopback local API. Other paths go to the handler
// given by WithHTTPHandler, or are 404; a request for one whose Host
// header is neither an IP address nor "localhost" is refused with 421
// (Misdirected Request): a page whose domain was rebound to 127.0.0.1
// must not read the status page or the metrics, as the WebSocket refuses
// its origin. For a listener that faces anyone, use PublicHandler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/":
		s.serveAPI(w, r, localAccess)
	default:
		if !wsconn.LocalHost(r) {
			http.Error(w, "misdirected request: the local API answers only a Host that is an IP address or localhost", http.StatusMisdirectedRequest)
			return
		}
		if s.cfg.HTTP != nil {
			s.cfg.HTTP.ServeHTTP(w, r)
			return
		}
		http.NotFound(w, r)
	}
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request, acc *access) {
	s.hub.Serve(w, r, func(wc *wsconn.Conn) wsconn.Handler {
		c := &Conn{
			srv:   s,
			wc:    wc,
			log:   wc.Logger(),
			calls: make(chan struct{}, s.cfg.Limits.MaxPendingCalls),
		}
		c.replyAny = c.replyIfAny
		c.SetValue(accessKey{}, acc)
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		return wsconn.Handler{Frame: c.handleFrame, Ended: func() {
			c.ended()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}}
	})
}

// Clients returns the number of connected clients.
func (s *Server) Clients() int { return s.hub.Len() }

// MaxClients returns the most connections the server holds
// (Limits.MaxClients).
func (s *Server) MaxClients() int { return s.cfg.Limits.MaxClients }

// Close stops the listeners started by Serve, Start and ListenAndServe,
// closes every client connection (status 1001 "going away"), and waits
// until every goroutine of the server has returned. Handlers see their
// contexts end. Close is idempotent; later calls return nil. A Server
// mounted in another http.Server stops accepting upgrades but does not
// stop that server.
func (s *Server) Close() error {
	var errs []error
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true // from here on newConn refuses, so conns only shrinks
		servers := s.servers
		s.mu.Unlock()
		// Shutdown, not Close: net/http writes the 101 response before it
		// marks the connection hijacked, so an upgrade the client already
		// sees as done can still count as an active HTTP connection,
		// which Close would cut. Shutdown waits for it (briefly).
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Limits.WriteTimeout)
		for _, hs := range servers {
			if err := hs.Shutdown(ctx); err != nil {
				if err := hs.Close(); err != nil {
					errs = append(errs, err)
				}
			}
		}
		cancel()
		s.hub.Close("server closing")
		s.wg.Wait()
		if s.serving != nil {
			// Every connection has ended: withdraw what they served.
			s.serving.close()
		}
		s.log.Info("stopped")
	})
	return errors.Join(errs...)
}
