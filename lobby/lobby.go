package lobby

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/meshagent/meshagent/internal/wsconn"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// Lobby is seed 000's Agent Lobby (see the package documentation): an
// http.Handler that serves one WebSocket client per request. It is safe
// for concurrent use.
type Lobby struct {
	cfg      Config
	log      *slog.Logger
	mesh     Mesh
	st       *store.Store
	newToken func() string

	ctx     context.Context // ends at Close
	cancel  context.CancelFunc
	changed chan struct{} // capacity 1: a coalesced "look again" for the notifier

	regMu      sync.Mutex // serialises REGISTER's check-then-write
	registered int        // agents in the store, as of the last write; guarded by regMu
	// skeletons maps the skeleton of each registered id to the id (see
	// checkNewAgentID); guarded by regMu.
	skeletons map[string]string

	// mu guards the fields below (and conn.agent).
	mu       sync.Mutex
	agents   map[string]*connectedAgent // connected agents by id
	seq      uint64                     // attach order
	pending  map[pendingKey]*pendingRequest
	onChange []func()

	hub       *wsconn.Hub    // the connections
	wg        sync.WaitGroup // the notifier
	closeOnce sync.Once
}

// connectedAgent is a connected agent.
type connectedAgent struct {
	id   string
	caps []protocol.Capability
	conn *conn
	seq  uint64
}

// New returns a lobby backed by st (which persists registrations;
// the caller closes it after the lobby) and reaching the mesh through
// mesh. It does not listen: mount it as an http.Handler.
func New(mesh Mesh, st *store.Store, opts ...Option) (*Lobby, error) {
	if mesh == nil {
		return nil, ErrNoMesh
	}
	if st == nil {
		return nil, ErrNoStore
	}
	cfg := DefaultConfig()
	if err := cfg.Apply(opts...); err != nil {
		return nil, err
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	rctx, rcancel := context.WithTimeout(context.Background(), cfg.Limits.WriteTimeout)
	regs, err := st.Registrations(rctx)
	rcancel()
	if err != nil {
		return nil, fmt.Errorf("lobby: read registrations: %w", err)
	}
	log := cfg.Logger.With("component", "lobby")
	hub, err := wsconn.NewHub(wsconn.Config{
		Limits:         cfg.Limits,
		OriginPatterns: cfg.OriginPatterns,
		Logger:         log,
		InitDeadline:   "register deadline: no REGISTER or authenticated message within %v",
		ErrorPrefix:    "relay", // what clients of the relay have always read
	})
	if err != nil {
		return nil, fmt.Errorf("lobby: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Lobby{
		registered: len(regs),
		cfg:        cfg,
		log:        log,
		hub:        hub,
		mesh:       mesh,
		st:         st,
		newToken:   randomToken,
		ctx:        ctx,
		cancel:     cancel,
		changed:    make(chan struct{}, 1),
		agents:     make(map[string]*connectedAgent),
		pending:    make(map[pendingKey]*pendingRequest),
		skeletons:  make(map[string]string, len(regs)),
	}
	for _, r := range regs {
		l.noteSkeleton(r.AgentID)
	}
	l.wg.Go(l.notifier)
	return l, nil
}

// randomToken returns 256 random bits, base64url without padding.
func randomToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ServeHTTP upgrades the request to a WebSocket and serves the lobby on
// it until the connection ends.
func (l *Lobby) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.hub.Serve(w, r, func(ws *wsconn.Conn) wsconn.Handler {
		c := newConn(l, ws)
		return wsconn.Handler{Frame: c.handle, Ended: func() { l.connEnded(c) }}
	})
}

// connEnded forgets a connection whose goroutines have all returned; its
// agent, if still attached here, leaves the directory.
func (l *Lobby) connEnded(c *conn) {
	l.mu.Lock()
	changed := false
	if a := l.agents[c.agent]; a != nil && a.conn == c {
		delete(l.agents, c.agent)
		changed = true
		c.log.Info("lobby agent detached", "agent", c.agent)
	}
	c.agent = ""
	l.mu.Unlock()
	if changed {
		l.notifyChange()
	}
}

// Clients returns the number of connected lobby clients.
func (l *Lobby) Clients() int { return l.hub.Len() }

// Close closes every connection (status 1001), ends pending Serve calls
// with INTERNAL_ERROR, and waits until every goroutine of the lobby has
// returned. Registrations stay in the store. Close is idempotent and
// always returns nil; it does not close the store.
func (l *Lobby) Close() error {
	l.closeOnce.Do(func() {
		l.hub.Close("lobby closing")
		l.cancel()
		l.wg.Wait()
		l.log.Info("stopped")
	})
	return nil
}

// storeCtx bounds one store operation for connection c.
func (l *Lobby) storeCtx(c *conn) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, l.cfg.Limits.WriteTimeout)
}
