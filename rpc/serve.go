package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// serveTable is who serves what through this server: the capabilities its
// clients serve, each with the pool of connections serving it, and the
// pool taking direct messages. The node is told (Provider.Offer) the
// union of the capabilities; the table picks a connection for each
// request.
type serveTable struct {
	p     Provider
	log   *slog.Logger
	grace time.Duration

	// offerMu orders the changes to what is offered, so that the node
	// always ends up with the last one; it is taken before mu.
	offerMu sync.Mutex

	mu       sync.Mutex
	closed   bool
	caps     map[string]*servedCap
	conns    map[*Conn]*servingConn
	messages *pool // nil until a client asks for direct messages
	seq      uint64
	wg       sync.WaitGroup // grace expiries running
}

// servedCap is one capability served by the clients: its definition (the
// same for every connection serving it) and their pool.
type servedCap struct {
	def   protocol.Capability
	canon string // def as canonical JSON, to compare definitions
	pool  *pool
}

// pool is the connections serving one capability, or taking direct
// messages. When the last one goes away the pool waits grace for another
// before it is dropped; requests meanwhile wait for one.
type pool struct {
	conns   []*servingConn
	changed chan struct{} // closed (and replaced) when conns grows or the pool is dropped
	timer   *time.Timer   // the grace, while conns is empty
	dropped bool
}

func newPool() *pool { return &pool{changed: make(chan struct{})} }

// signal wakes the requests waiting for the pool.
func (p *pool) signal() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *pool) add(sc *servingConn) {
	if !slices.Contains(p.conns, sc) {
		p.conns = append(p.conns, sc)
	}
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.signal()
}

// remove takes sc out and reports whether the pool is now empty.
func (p *pool) remove(sc *servingConn) bool {
	p.conns = slices.DeleteFunc(p.conns, func(x *servingConn) bool { return x == sc })
	return len(p.conns) == 0
}

func (p *pool) drop() {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	p.dropped = true
	p.signal()
}

// servingConn is one connection that serves capabilities or takes direct
// messages.
type servingConn struct {
	c        *Conn
	names    map[string]bool      // capabilities it serves
	messages bool                 // it takes direct messages
	inflight int                  // requests handed to it and not answered
	picked   uint64               // when it was last picked, to break ties
	tasks    map[string]*handling // by task id
}

func newServeTable(p Provider, grace time.Duration, log *slog.Logger) *serveTable {
	return &serveTable{p: p, grace: grace, log: log, caps: map[string]*servedCap{}, conns: map[*Conn]*servingConn{}}
}

func (s *Server) registerServeMethods() {
	if s.cfg.Provider == nil {
		return
	}
	s.serving = newServeTable(s.cfg.Provider, s.cfg.ServeGrace, s.log)
	s.Handle(MethodMeshServe, s.meshServe)
	s.Handle(MethodMeshUnserve, s.meshUnserve)
	s.Handle(MethodMeshOnMessage, s.meshOnMessage)
	s.Handle(MethodMeshSendMessage, s.meshSendMessage)
	// The client's mesh.progress shares its name with the node's
	// notification about a mesh.call; they travel in opposite directions.
	s.handleInline(MethodMeshProgress, s.meshTaskProgress)
	s.handleInline(MethodMeshSetState, s.meshSetState)
}

// localOnly refuses a public listener's clients: what they serve would be
// offered as the relay's own, which is the lobby's job.
func localOnly(r *Request) error {
	if r.Conn.Public() {
		return Errorf(CodeForbidden, "forbidden: %s is served on a node's local API only", r.Method)
	}
	return nil
}

// conn returns c's serving state, making it (and arranging its clean-up)
// on first use. Call with t.mu held.
func (t *serveTable) conn(c *Conn) *servingConn {
	sc := t.conns[c]
	if sc == nil {
		sc = &servingConn{c: c, names: map[string]bool{}, tasks: map[string]*handling{}}
		t.conns[c] = sc
		c.AfterClose(func() { t.gone(sc) })
	}
	return sc
}

func (s *Server) meshServe(_ context.Context, r *Request) (any, error) {
	if err := localOnly(r); err != nil {
		return nil, err
	}
	var p ServeParams
	if err := DecodeParams(r.Method, r.Params, &p); err != nil {
		return nil, err
	}
	if len(p.Capabilities) == 0 {
		return nil, Errorf(CodeInvalidParams, `invalid params: "capabilities" must list at least one capability object`)
	}
	caps := make([]protocol.Capability, 0, len(p.Capabilities))
	seen := map[string]bool{}
	for i, raw := range p.Capabilities {
		c, err := decodeServedCapability(raw)
		if err != nil {
			return nil, Errorf(CodeInvalidParams, "invalid params: mesh.serve: capabilities[%d]: %v", i, err)
		}
		if seen[c.Name] {
			return nil, Errorf(CodeInvalidParams, "invalid params: mesh.serve: capability %q listed twice", c.Name)
		}
		seen[c.Name] = true
		caps = append(caps, c)
	}
	return s.serving.serve(r.Conn, caps)
}

// decodeServedCapability reads one capability object of mesh.serve:
// seed 000's members and "idempotent" (kept: CallAny fails a request over
// to another provider only when it is true), exactly; a handler is the
// client itself, so a "handler" member is refused.
func decodeServedCapability(raw json.RawMessage) (protocol.Capability, error) {
	var c protocol.Capability
	var h struct {
		Handler json.RawMessage `json:"handler"`
	}
	if protocol.DecodeStrict(raw, &h, protocol.AllowUnknown()) == nil && h.Handler != nil {
		return c, errors.New(`a served capability has no "handler": the client serving it is the handler`)
	}
	if err := decodeStrict(raw, &c); err != nil {
		return c, err
	}
	if err := c.Validate(); err != nil {
		return c, errors.New(protocol.AsError(err).Message)
	}
	for _, s := range []struct {
		name   string
		schema json.RawMessage
	}{{"input_schema", c.InputSchema}, {"output_schema", c.OutputSchema}} {
		if _, err := protocol.CompileSchema(s.schema); err != nil {
			return c, fmt.Errorf("capability %q %s: %w", c.Name, s.name, err)
		}
	}
	return c, nil
}

// serveUndo restores one capability's entry after the node refused an
// offer.
type serveUndo struct {
	name      string
	prev      *servedCap // nil: serve made the entry
	def       protocol.Capability
	canon     string
	newToConn bool
}

// serve makes c a server of caps and has the node offer them. A
// capability another live connection serves must have the same
// definition; one nobody serves right now (in its grace) takes the new
// one.
func (t *serveTable) serve(c *Conn, caps []protocol.Capability) (ServeResult, error) {
	t.offerMu.Lock()
	defer t.offerMu.Unlock()
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return ServeResult{}, ErrServerClosed
	}
	sc := t.conn(c)
	var undos []serveUndo
	changed := false
	for _, def := range caps {
		canon, err := canonical(def)
		if err == nil {
			cur := t.caps[def.Name]
			if cur != nil && cur.canon != canon && slices.ContainsFunc(cur.pool.conns, func(x *servingConn) bool { return x != sc }) {
				err = fmt.Errorf("capability %q is served by another client of this node with a different definition", def.Name)
			}
		}
		if err != nil {
			t.undo(sc, undos)
			t.mu.Unlock()
			return ServeResult{}, Errorf(CodeInvalidParams, "invalid params: mesh.serve: %v", err)
		}
		cur := t.caps[def.Name]
		u := serveUndo{name: def.Name, prev: cur, newToConn: !sc.names[def.Name]}
		if cur == nil {
			cur = &servedCap{pool: newPool()}
			t.caps[def.Name] = cur
		} else {
			u.def, u.canon = cur.def, cur.canon
		}
		if cur.canon != canon {
			cur.def, cur.canon = def, canon
			changed = true
		}
		sc.names[def.Name] = true
		undos = append(undos, u)
	}
	offered := t.offeredLocked()
	t.mu.Unlock()
	if changed {
		if err := t.p.Offer(offered, t.handle); err != nil {
			t.mu.Lock()
			t.undo(sc, undos)
			t.mu.Unlock()
			return ServeResult{}, Errorf(CodeInvalidParams, "invalid params: mesh.serve: %v", err)
		}
	}
	// Only now may requests reach c: the node accepted the offer (and the
	// client registered its handlers before it asked).
	t.mu.Lock()
	for _, def := range caps {
		t.caps[def.Name].pool.add(sc)
	}
	res := ServeResult{Serving: sc.served()}
	t.mu.Unlock()
	c.log.Info("client serves capabilities", "client_id", c.ClientID(), "capabilities", res.Serving)
	return res, nil
}

// undo restores the entries serve changed, last first. Call with t.mu
// held.
func (t *serveTable) undo(sc *servingConn, undos []serveUndo) {
	for _, u := range slices.Backward(undos) {
		if u.newToConn {
			delete(sc.names, u.name)
		}
		if u.prev == nil {
			delete(t.caps, u.name)
			continue
		}
		u.prev.def, u.prev.canon = u.def, u.canon
	}
}

func canonical(c protocol.Capability) (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	b, err = protocol.MarshalCanonical(b)
	return string(b), err
}

// served returns the sorted names sc serves. Call with t.mu held.
func (sc *servingConn) served() []string {
	return slices.Sorted(maps.Keys(sc.names))
}

// offeredLocked returns what the node offers for the clients, sorted by
// name. Call with t.mu held.
func (t *serveTable) offeredLocked() []protocol.Capability {
	out := make([]protocol.Capability, 0, len(t.caps))
	for _, name := range slices.Sorted(maps.Keys(t.caps)) {
		out = append(out, t.caps[name].def)
	}
	return out
}

func (s *Server) meshUnserve(_ context.Context, r *Request) (any, error) {
	if err := localOnly(r); err != nil {
		return nil, err
	}
	var p UnserveParams
	if err := DecodeParams(r.Method, r.Params, &p); err != nil {
		return nil, err
	}
	return s.serving.unserve(r.Conn, p.Capabilities)
}

// unserve stops c serving names. A capability no connection serves any
// longer is withdrawn at once: the client asked for it, so there is no
// grace.
func (t *serveTable) unserve(c *Conn, names []string) (ServeResult, error) {
	t.offerMu.Lock()
	defer t.offerMu.Unlock()
	t.mu.Lock()
	sc := t.conns[c]
	if sc == nil {
		t.mu.Unlock()
		return ServeResult{Serving: []string{}}, nil
	}
	changed := false
	for _, name := range names {
		if !sc.names[name] {
			continue
		}
		delete(sc.names, name)
		cur := t.caps[name]
		if cur.pool.remove(sc) {
			cur.pool.drop()
			delete(t.caps, name)
			changed = true
		}
	}
	offered := t.offeredLocked()
	res := ServeResult{Serving: sc.served()}
	t.mu.Unlock()
	if changed {
		if err := t.p.Offer(offered, t.handle); err != nil {
			t.log.Error("capabilities not withdrawn", "err", err)
			return res, fmt.Errorf("rpc: withdraw capabilities: %w", err)
		}
	}
	return res, nil
}

// gone runs once c has ended: its capabilities (and its share of the
// direct messages) stay offered for the grace, and are withdrawn unless a
// connection serves them again meanwhile.
func (t *serveTable) gone(sc *servingConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.conns, sc.c)
	if t.closed {
		return
	}
	for name := range sc.names {
		cur := t.caps[name]
		if cur != nil && cur.pool.remove(sc) {
			t.startGrace(cur.pool, func() { t.expireCap(name, cur.pool) })
		}
	}
	if sc.messages && t.messages != nil && t.messages.remove(sc) {
		p := t.messages
		t.startGrace(p, func() { t.expireMessages(p) })
	}
}

// startGrace arms p's grace timer. Call with t.mu held.
func (t *serveTable) startGrace(p *pool, expire func()) {
	if p.timer != nil {
		p.timer.Stop()
	}
	p.timer = time.AfterFunc(t.grace, func() {
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			return
		}
		t.wg.Add(1) // under mu while open: close's Wait comes after
		t.mu.Unlock()
		defer t.wg.Done()
		expire()
	})
}

// expireCap withdraws a capability whose grace passed with no connection
// serving it.
func (t *serveTable) expireCap(name string, p *pool) {
	t.offerMu.Lock()
	defer t.offerMu.Unlock()
	t.mu.Lock()
	cur := t.caps[name]
	if t.closed || cur == nil || cur.pool != p || len(p.conns) > 0 {
		t.mu.Unlock()
		return
	}
	p.drop()
	delete(t.caps, name)
	offered := t.offeredLocked()
	t.mu.Unlock()
	t.log.Info("capability withdrawn: no client served it again within the grace", "capability", name, "grace", t.grace)
	if err := t.p.Offer(offered, t.handle); err != nil {
		t.log.Error("capability not withdrawn", "capability", name, "err", err)
	}
}

// close withdraws everything the clients served, once every connection
// has ended.
func (t *serveTable) close() {
	t.mu.Lock()
	t.closed = true
	for _, c := range t.caps {
		c.pool.drop()
	}
	if t.messages != nil {
		t.messages.drop()
	}
	offered, messages := len(t.caps) > 0, t.messages != nil
	t.caps, t.messages = map[string]*servedCap{}, nil
	t.mu.Unlock()
	t.wg.Wait()
	t.offerMu.Lock()
	defer t.offerMu.Unlock()
	if offered {
		if err := t.p.Offer(nil, t.handle); err != nil {
			t.log.Error("capabilities not withdrawn", "err", err)
		}
	}
	if messages {
		t.p.OnMessage(nil)
	}
}

// pick returns the connection of the pool get returns with the fewest
// requests in flight (the least recently picked of those), counting the
// request in; release uncounts it. With nobody in the pool it waits for
// the pool to grow until the pool is dropped or ctx ends.
func (t *serveTable) pick(ctx context.Context, get func() *pool) (*servingConn, func(), error) {
	for {
		t.mu.Lock()
		p := get()
		if p == nil || p.dropped {
			t.mu.Unlock()
			return nil, nil, errNoServer
		}
		var best *servingConn
		for _, sc := range p.conns {
			if best == nil || sc.inflight < best.inflight || (sc.inflight == best.inflight && sc.picked < best.picked) {
				best = sc
			}
		}
		if best != nil {
			t.seq++
			best.inflight++
			best.picked = t.seq
			t.mu.Unlock()
			return best, func() {
				t.mu.Lock()
				best.inflight--
				t.mu.Unlock()
			}, nil
		}
		wake := p.changed
		t.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
}

// errNoServer is pick's answer when no connection serves (any longer).
var errNoServer = errors.New("rpc: no client serves it")
