package relay

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// Lobby is seed 000's Agent Lobby over WebSocket: an http.Handler that
// speaks the seed's message shapes (LobbyMessage), one JSON message per
// WebSocket text message, at whatever path it is mounted (the relay
// command mounts it at "/lobby", next to the bus at "/"). It is safe for
// concurrent use.
//
// # Registration and tokens
//
// REGISTER (no token) stores the sender_id as an agent with its
// capabilities (protocol.Capability objects, each validated) and answers
// REGISTER_ACK with a fresh auth_token: 256 random bits from crypto/rand,
// base64url. The store keeps only the token's SHA-256, so registrations and
// tokens survive a restart of the relay. A sender_id already registered is
// refused with ERROR unless the REGISTER carries that agent's current
// auth_token; then it re-registers: the capabilities are replaced and a new
// token is issued (the old one stops working). Ids that parse as mesh
// agent ids (sign.ParseAgentID) and the lobby's own id are refused, so a
// lobby client can never pass for a mesh agent in an
// authorized_requester_ids check. A client that loses its token cannot
// reclaim its agent_id.
//
// A new agent_id must be printable ASCII ('!' to '~') without '/' or '*',
// and must not look like a registered one: ids equal once lower-cased and
// with "0" read as "o", "1", "i" and "|" as "l", "rn" as "m" and "vv" as
// "w" are refused. So "rogue_ОО7" (Cyrillic О), "ｒｏｇｕｅ_007"
// (fullwidth) and "Rogue_OO7" are all refused, with ERROR code
// INVALID_MESSAGE, while "rogue_007" is registered.
//
// Every other message must carry the auth_token of its sender_id, or it
// is answered with ERROR (code UNAUTHORIZED) and goes no further.
//
// # Connections and re-attaching
//
// A connection serves at most one agent. It is bound to the agent by a
// REGISTER, or by the first message carrying a valid auth_token: a client
// that reconnects (after a network failure or a relay restart) re-attaches
// just by sending its next message with its old token; no REGISTER is
// needed. If the agent is already attached on another connection, the
// newer connection takes over and the older one stops receiving requests.
// An agent is "connected" while a connection is bound to it: only
// connected agents are discovered and served, and when its connection ends
// it leaves the directory (its registration stays in the store).
//
// # Messages
//
// DISCOVER_SERVICES {capability_name, query_keywords} is answered by
// SERVICES_AVAILABLE listing the connected lobby agents (other than the
// sender) with their capabilities that match, sorted by agent id,
// followed by the mesh agents the directory finds within
// LobbyConfig.DiscoverTimeout when the Mesh is a Discoverer, sorted by
// agent id (the relay's own node is left out: it advertises the lobby's
// capabilities itself). A capability matches when its name is
// capability_name, or when one of query_keywords (seed 000 §4.3's
// alternative; at most MaxQueryKeywords) equals one of its keywords or
// occurs in its name or description, ignoring case. In the mesh
// directory, which records exact names and keywords, each keyword is
// looked up as sent and lower-cased. At least one of the two is needed;
// SERVICES_AVAILABLE echoes them as discovered_for_capability and
// discovered_for_keywords.
//
// REQUEST {capability_name, …} to receiver_id goes:
//
//   - to a connected lobby agent: after the §5.3 check (the capability
//     exists, and the requester is in its authorized_requester_ids when
//     that list is non-empty), the REQUEST is forwarded with the sender's
//     auth_token removed. The provider's RESPONSEs with the same
//     conversation_id and receiver_id = the requester are routed back:
//     any number with status "in_progress", then one final one (any other
//     status). A RESPONSE that no REQUEST awaits is refused with ERROR. A
//     REQUEST without conversation_id gets one (a UUID) from the lobby.
//   - to a mesh agent (a peer ID or base64 key that is not a lobby agent):
//     Mesh.Call with action = capability_name and params = the payload
//     without capability_name. A result object becomes the RESPONSE
//     payload with "status" added; a result that is not an object is put
//     under "result". The relay's node signs the request and vouches for
//     the lobby agent in it (CallRequest.OnBehalfOf = LobbyClientPrefix +
//     agent_id, signed in the envelope's metadata): the mesh agent sees
//     the relay as the signer and the lobby agent as the client it speaks
//     for, and authorizes "<relay id>/lobby:<agent_id>", not the relay.
//
// As seed 000 §5.3 and §8 say, a REQUEST that is refused or fails
// (UNAUTHORIZED, CAPABILITY_NOT_SUPPORTED, UNKNOWN_AGENT, TIMEOUT after
// LobbyConfig.RequestTimeout, a mesh error) is answered with a RESPONSE
// with status "error", the same conversation_id, and payload
// {"status":"error","error":…,"code":…,"details"?} (LobbyErrorResponse);
// its sender_id is the lobby when the lobby refused it, the receiver when
// the receiver or the mesh answered. ERROR (LobbyErrorPayload) is for
// everything else: malformed JSON, an unknown message_type, a bad token, a
// REQUEST without capability_name or receiver_id. The connection stays
// open after any of them. An ERROR an agent sends for a pending REQUEST
// ends it as a RESPONSE with status "error"; the lobby never answers an
// ERROR with an ERROR.
//
// # The mesh side
//
// Capabilities lists what the connected lobby agents offer, for the relay
// command to advertise in the mesh; OnChange tells when that changes; and
// Serve forwards a mesh request to the lobby agent serving a capability.
// When several agents offer the same name, the one that attached most
// recently serves it.
//
// # Goroutines and limits
//
// Per connection: the read loop, a writer, a pinger, and one goroutine
// per REQUEST or DISCOVER_SERVICES in flight (at most
// Limits.MaxConcurrentCalls); plus one goroutine of the Lobby that runs
// OnChange callbacks. Close stops and waits for all of them. Slow readers
// are disconnected as on the bus (see Limits).
type Lobby struct {
	cfg      LobbyConfig
	log      *slog.Logger
	mesh     Mesh
	st       *store.Store
	origins  Config // only OriginPatterns, for originAllowed
	newToken func() string

	ctx     context.Context // ends at Close
	cancel  context.CancelFunc
	changed chan struct{} // capacity 1: a coalesced "look again" for the notifier

	regMu      sync.Mutex // serialises REGISTER's check-then-write
	registered int        // agents in the store, as of the last write; guarded by regMu
	// skeletons maps the skeleton of each registered id to the id (see
	// checkNewAgentID); guarded by regMu.
	skeletons map[string]string

	// mu guards the fields below (and lobbyConn.agent). wg.Add happens
	// only under mu while closed is false.
	mu        sync.Mutex
	closed    bool
	conns     map[*lobbyConn]struct{}
	admit     *admission
	nextConn  uint64
	agents    map[string]*lobbyAgent // connected agents by id
	seq       uint64                 // attach order
	pending   map[pendingKey]*lobbyPending
	onChange  []func()
	wg        sync.WaitGroup
	closeOnce sync.Once
}

// lobbyAgent is a connected agent.
type lobbyAgent struct {
	id   string
	caps []protocol.Capability
	conn *lobbyConn
	seq  uint64
}

// LobbyClientPrefix starts the name by which the relay vouches for a lobby
// agent when it calls a mesh agent for it (protocol.MetaOnBehalfOf):
// lobby agent alice is "lobby:alice", which a provider's
// authorized_requester_ids and policy name "<relay id>/lobby:alice" (or
// "<relay id>/lobby:*" for every lobby agent of that relay).
const LobbyClientPrefix = "lobby:"

// pendingKey identifies a forwarded REQUEST awaiting its RESPONSE.
type pendingKey struct{ provider, requester, conv string }

// lobbyPending is a forwarded REQUEST awaiting its RESPONSE. progress
// (may be nil) receives in_progress payloads on the provider's read loop
// and must not block; done receives the final payload once.
type lobbyPending struct {
	progress func(json.RawMessage)
	done     chan json.RawMessage
}

// NewLobby returns a lobby backed by st (which persists registrations;
// the caller closes it after the lobby) and reaching the mesh through
// mesh. It does not listen: mount it as an http.Handler.
func NewLobby(mesh Mesh, st *store.Store, opts ...LobbyOption) (*Lobby, error) {
	if mesh == nil {
		return nil, errors.New("relay: NewLobby needs a Mesh")
	}
	if st == nil {
		return nil, errors.New("relay: NewLobby needs a store for registrations")
	}
	cfg := DefaultLobbyConfig()
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
		return nil, fmt.Errorf("relay: lobby: read registrations: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Lobby{
		registered: len(regs),
		cfg:        cfg,
		log:        cfg.Logger.With("component", "lobby"),
		mesh:       mesh,
		st:         st,
		origins:    Config{OriginPatterns: cfg.OriginPatterns},
		newToken:   newLobbyToken,
		ctx:        ctx,
		cancel:     cancel,
		changed:    make(chan struct{}, 1),
		conns:      make(map[*lobbyConn]struct{}),
		admit:      newAdmission(cfg.Limits),
		agents:     make(map[string]*lobbyAgent),
		pending:    make(map[pendingKey]*lobbyPending),
		skeletons:  make(map[string]string, len(regs)),
	}
	for _, r := range regs {
		l.noteSkeleton(r.AgentID)
	}
	l.wg.Go(l.notifier)
	return l, nil
}

// newLobbyToken returns 256 random bits, base64url without padding.
func newLobbyToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// ServeHTTP upgrades the request to a WebSocket and serves the lobby on
// it.
func (l *Lobby) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !l.origins.originAllowed(r) {
		l.log.Debug("websocket origin refused", "remote_addr", r.RemoteAddr, "origin", r.Header.Get("Origin"))
		http.Error(w, "relay: origin not allowed", http.StatusForbidden)
		return
	}
	c, status := l.newConn(r.RemoteAddr)
	if c == nil {
		http.Error(w, "relay: "+http.StatusText(status), status)
		return
	}
	defer l.wg.Done() // newConn added this goroutine
	rec := &hijackRecorder{ResponseWriter: w}
	ws, err := websocket.Accept(rec, r, &websocket.AcceptOptions{
		InsecureSkipVerify: true, // origins were checked above
		CompressionMode:    websocket.CompressionDisabled,
	})
	if err != nil {
		l.log.Debug("websocket upgrade failed", "remote_addr", r.RemoteAddr, "err", err)
		l.mu.Lock()
		delete(l.conns, c)
		l.admit.release(c.ticket)
		l.mu.Unlock()
		c.cancel()
		return
	}
	ws.SetReadLimit(l.cfg.Limits.MaxMessageBytes)
	c.ws, c.netConn = ws, rec.conn
	c.log.Debug("lobby client connected")
	c.serve()
}

func (l *Lobby) newConn(remote string) (*lobbyConn, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, http.StatusServiceUnavailable
	}
	l.nextConn++
	ctx, cancel := context.WithCancel(context.Background())
	c := &lobbyConn{
		l:      l,
		id:     l.nextConn,
		log:    l.log.With("client", l.nextConn, "remote_addr", remote),
		limits: l.cfg.Limits,
		ctx:    ctx,
		cancel: cancel,
		send:   make(chan []byte, l.cfg.Limits.SendQueue),
		slots:  make(chan struct{}, l.cfg.Limits.MaxConcurrentCalls),
	}
	t, status := l.admit.take(remote, c.evict)
	if t == nil {
		cancel()
		l.log.Warn("lobby client refused: every slot holds a registered client", "remote_addr", remote,
			"status", status, "max", l.cfg.Limits.MaxClients, "max_per_ip", l.cfg.Limits.MaxClientsPerIP)
		return nil, status
	}
	c.ticket = t
	l.conns[c] = struct{}{}
	l.wg.Add(1)
	return c, 0
}

// connEnded forgets a connection whose goroutines have all returned; its
// agent, if still attached here, leaves the directory.
func (l *Lobby) connEnded(c *lobbyConn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.admit.release(c.ticket)
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
func (l *Lobby) Clients() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}

// Close closes every connection (status 1001), ends pending Serve calls
// with INTERNAL_ERROR, and waits until every goroutine of the lobby has
// returned. Registrations stay in the store. Close is idempotent and
// always returns nil; it does not close the store.
func (l *Lobby) Close() error {
	l.closeOnce.Do(func() {
		l.mu.Lock()
		l.closed = true
		conns := slices.Collect(maps.Keys(l.conns))
		l.mu.Unlock()
		for _, c := range conns {
			c.shut(websocket.StatusGoingAway, "lobby closing", false)
		}
		l.cancel()
		l.wg.Wait()
		l.log.Info("stopped")
	})
	return nil
}

// Capabilities returns the capabilities the connected lobby agents offer,
// one per name, sorted by name: for a name offered by several agents, the
// object of the agent that attached most recently, which is the one Serve
// calls. The result is a copy.
func (l *Lobby) Capabilities() []protocol.Capability {
	l.mu.Lock()
	best := make(map[string]*lobbyAgent)
	caps := make(map[string]protocol.Capability)
	for _, a := range l.agents {
		for _, c := range a.caps {
			if b := best[c.Name]; b == nil || a.seq > b.seq {
				best[c.Name], caps[c.Name] = a, c
			}
		}
	}
	l.mu.Unlock()
	out := make([]protocol.Capability, 0, len(caps))
	for _, name := range slices.Sorted(maps.Keys(caps)) {
		out = append(out, cloneCapability(caps[name]))
	}
	return out
}

func cloneCapability(c protocol.Capability) protocol.Capability {
	c.AuthorizedRequesterIDs = slices.Clone(c.AuthorizedRequesterIDs)
	c.Keywords = slices.Clone(c.Keywords)
	c.InputSchema = slices.Clone(c.InputSchema)
	c.OutputSchema = slices.Clone(c.OutputSchema)
	return c
}

// OnChange registers f to be called whenever the result of Capabilities
// changes (an agent attaches, re-registers or detaches and the set of
// objects is different afterwards). Calls run one at a time on a goroutine
// of the Lobby, with no lock held, and are coalesced: several changes in
// quick succession may produce one call, after which Capabilities returns
// the latest set. f must return promptly; Close waits for it. Changes
// before OnChange is called are not reported.
func (l *Lobby) OnChange(f func()) {
	if f == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.onChange = append(l.onChange, f)
}

func (l *Lobby) notifyChange() {
	select {
	case l.changed <- struct{}{}:
	default: // a look is already due
	}
}

// notifier runs OnChange callbacks when the capability set has changed.
func (l *Lobby) notifier() {
	last := "[]"
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-l.changed:
		}
		b, err := json.Marshal(l.Capabilities())
		if err != nil || string(b) == last {
			continue
		}
		last = string(b)
		l.mu.Lock()
		fns := slices.Clone(l.onChange)
		l.mu.Unlock()
		for _, f := range fns {
			l.runHook(f)
		}
	}
}

func (l *Lobby) runHook(f func()) {
	defer func() {
		if p := recover(); p != nil {
			l.log.Error("OnChange callback panicked", "panic", p)
		}
	}()
	f()
}

// Serve forwards a request from the mesh to the lobby agent serving
// capability (see Capabilities) as a REQUEST with sender_id =
// requesterAgentID (normalised to its peer ID form when it is a mesh agent
// id) and a fresh conversation_id, and waits for the final RESPONSE. The
// §5.3 check compares requesterAgentID with the capability's
// authorized_requester_ids, both normalised. params must be a JSON object
// (or empty); its members follow capability_name in the REQUEST payload.
// The result is the final RESPONSE payload without "status".
//
// Errors are *protocol.Error: CAPABILITY_NOT_SUPPORTED (no connected agent
// offers it; details list the available names), UNAUTHORIZED,
// INVALID_MESSAGE (bad params), TIMEOUT (ctx's deadline or
// LobbyConfig.RequestTimeout passed), INTERNAL_ERROR (the agent
// disconnected, the lobby closed); a RESPONSE with status "error" becomes
// an error with the payload's code if it is a known one (INTERNAL_ERROR
// otherwise) and its error text as message.
func (l *Lobby) Serve(ctx context.Context, requesterAgentID string, capability string, params json.RawMessage) (json.RawMessage, error) {
	if l.ctx.Err() != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "lobby closed")
	}
	requester := normalizeAgentID(requesterAgentID)
	if requester == "" || len(requester) > MaxLobbyIDLen {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "lobby: requester agent id must be 1 to %d bytes", MaxLobbyIDLen)
	}
	if err := (&protocol.Capability{Name: capability}).Validate(); err != nil {
		return nil, protocol.AsError(err)
	}
	var members []lobbyMember
	if p := trimJSONSpace(params); len(p) > 0 && !isNull(p) {
		var err error
		if !json.Valid(p) {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "lobby: params are not JSON")
		}
		if members, err = objectMembers(p); err != nil {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "lobby: params must be a JSON object: %v", err)
		}
	}
	payload := buildObject([]lobbyMember{{name: "capability_name", raw: json.RawMessage(strconvQuote(capability))}}, members, "capability_name")
	provider, ok := l.serving(capability)
	if !ok {
		names := make([]string, 0)
		for _, c := range l.Capabilities() {
			names = append(names, c.Name)
		}
		return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "no lobby agent offers capability %q", capability).
			WithDetails(map[string]any{"requested": capability, "available": names})
	}
	ctx, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
	defer cancel()
	res, pe := l.forward(ctx, provider, requester, protocol.NewID(), capability, payload, nil)
	if pe != nil {
		return nil, pe
	}
	return resultOf(res)
}

// serving returns the agent that serves capability: of the connected
// agents offering it, the one that attached last.
func (l *Lobby) serving(capability string) (string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var best *lobbyAgent
	for _, a := range l.agents {
		if findCapability(a.caps, capability) != nil && (best == nil || a.seq > best.seq) {
			best = a
		}
	}
	if best == nil {
		return "", false
	}
	return best.id, true
}

func findCapability(caps []protocol.Capability, name string) *protocol.Capability {
	for i := range caps {
		if caps[i].Name == name {
			return &caps[i]
		}
	}
	return nil
}

// normalizeAgentID returns a mesh agent id in its peer ID form, and any
// other id unchanged.
func normalizeAgentID(s string) string {
	if id, err := sign.ParseAgentID(s); err == nil {
		return id.String()
	}
	return s
}

// authorizedFor applies seed 000 §5.3: an empty (or absent)
// authorized_requester_ids is public; otherwise the requester must be
// listed. Mesh agent ids match in either form.
func authorizedFor(c *protocol.Capability, requester string) bool {
	if c.Public() {
		return true
	}
	want := normalizeAgentID(requester)
	for _, a := range c.AuthorizedRequesterIDs {
		if a == requester || normalizeAgentID(a) == want {
			return true
		}
	}
	return false
}

// forward sends a REQUEST to a connected lobby agent after the §5.3
// check and waits for its final RESPONSE payload.
func (l *Lobby) forward(ctx context.Context, provider, requester, conv, capability string, payload json.RawMessage, progress func(json.RawMessage)) (json.RawMessage, *protocol.Error) {
	key := pendingKey{provider: provider, requester: requester, conv: conv}
	p := &lobbyPending{progress: progress, done: make(chan json.RawMessage, 1)}
	l.mu.Lock()
	a := l.agents[provider]
	if a == nil {
		l.mu.Unlock()
		return nil, protocol.Errorf(protocol.CodeUnknownAgent, "agent %q is not connected to the lobby", provider)
	}
	c := findCapability(a.caps, capability)
	if c == nil {
		names := make([]string, 0, len(a.caps))
		for _, c := range a.caps {
			names = append(names, c.Name)
		}
		l.mu.Unlock()
		return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "agent %q does not offer capability %q", provider, capability).
			WithDetails(map[string]any{"requested": capability, "available": names})
	}
	if !authorizedFor(c, requester) {
		l.mu.Unlock()
		l.log.Info("request denied authorization", "requester", requester, "provider", provider, "capability", capability)
		return nil, protocol.Errorf(protocol.CodeUnauthorized, "Unauthorized: Agent '%s' is not authorized to call capability '%s' on agent '%s'.", requester, capability, provider)
	}
	if l.pending[key] != nil {
		l.mu.Unlock()
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "a REQUEST from %q to %q with conversation_id %q is already waiting for its RESPONSE", requester, provider, conv)
	}
	l.pending[key] = p
	conn := a.conn
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		if l.pending[key] == p {
			delete(l.pending, key)
		}
		l.mu.Unlock()
	}()
	l.log.Debug("request authorized", "requester", requester, "provider", provider, "capability", capability, "conversation_id", conv)
	err := conn.sendMsg(&LobbyMessage{SenderID: requester, ReceiverID: provider, MessageType: LobbyRequest, Payload: payload, ConversationID: conv})
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "agent %q could not be reached: %v", provider, err)
	}
	select {
	case res := <-p.done:
		return res, nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, protocol.Errorf(protocol.CodeTimeout, "agent %q did not answer in time", provider)
		}
		return nil, protocol.Errorf(protocol.CodeInternalError, "request cancelled")
	case <-conn.ctx.Done():
		return nil, protocol.Errorf(protocol.CodeInternalError, "agent %q disconnected before it answered", provider)
	case <-l.ctx.Done():
		return nil, protocol.Errorf(protocol.CodeInternalError, "lobby closed")
	}
}

// resultOf turns a final RESPONSE payload into Serve's result or error.
func resultOf(payload json.RawMessage) (json.RawMessage, error) {
	members, err := objectMembers(payload)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInternalError, "lobby agent answered a payload that is not an object")
	}
	status, _, _ := payloadString(members, "status")
	if status != string(protocol.StatusError) {
		return buildObject(nil, members, "status"), nil
	}
	pe := &protocol.Error{Code: protocol.CodeInternalError}
	if code, _, _ := payloadString(members, "code"); protocol.Code(code).Valid() {
		pe.Code = protocol.Code(code)
	}
	pe.Message, _, _ = payloadString(members, "error")
	if pe.Message == "" {
		pe.Message = "the lobby agent answered with status error"
	}
	for _, mb := range members {
		if mb.name == "details" && !isNull(mb.raw) {
			pe.Details = mb.raw
		}
	}
	return nil, pe
}

// handleFrame serves one message from a client, on its read loop.
func (l *Lobby) handleFrame(c *lobbyConn, frame []byte) {
	m, err := ParseLobbyMessage(frame)
	if err != nil {
		if m != nil && m.MessageType == LobbyError {
			c.log.Debug("dropped a malformed ERROR", "err", err)
			return
		}
		l.sendError(c, m, protocol.AsError(err))
		return
	}
	switch m.MessageType {
	case LobbyRegister:
		l.register(c, m)
	case LobbyDiscoverServices, LobbyRequest, LobbyResponse, LobbyError:
		agent, pe := l.authenticate(c, m)
		if pe != nil {
			if m.MessageType == LobbyError {
				c.log.Debug("dropped an ERROR that failed authentication", "err", pe.Message)
				return
			}
			l.sendError(c, m, pe)
			return
		}
		switch m.MessageType {
		case LobbyDiscoverServices:
			l.discover(c, m, agent)
		case LobbyRequest:
			l.request(c, m, agent)
		case LobbyResponse:
			l.response(c, m, agent)
		default:
			l.agentError(c, m, agent)
		}
	case LobbyRegisterAck, LobbyServicesAvailable:
		l.sendError(c, m, protocol.Errorf(protocol.CodeInvalidMessage, "message_type %s is sent by the lobby, not to it", m.MessageType))
	default:
		l.sendError(c, m, protocol.Errorf(protocol.CodeInvalidMessage, "unknown message_type %q (the lobby serves REGISTER, DISCOVER_SERVICES, REQUEST, RESPONSE, ERROR)", m.MessageType))
	}
}

// sendError answers m (nil if the frame was not a message at all) with an
// ERROR.
func (l *Lobby) sendError(c *lobbyConn, m *LobbyMessage, pe *protocol.Error) {
	out := &LobbyMessage{SenderID: l.cfg.LobbyID, MessageType: LobbyError}
	p := LobbyErrorPayload{Error: pe.Message, Code: pe.Code}
	if m != nil {
		out.ReceiverID, out.ConversationID = m.SenderID, m.ConversationID
		p.OriginalMessageType, p.OriginalConversationID = m.MessageType, m.ConversationID
	}
	if p.Error == "" {
		p.Error = string(pe.Code)
	}
	b, err := marshal(p)
	if err != nil {
		return
	}
	out.Payload = b
	c.log.Debug("lobby error", "code", pe.Code, "err", pe.Message)
	_ = c.sendMsg(out)
}

// storeCtx bounds one store operation for connection c.
func (l *Lobby) storeCtx(c *lobbyConn) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, l.cfg.Limits.WriteTimeout)
}

// checkAgentID validates an agent_id a client registers (or
// re-registers); a new one must also pass checkNewAgentID.
func (l *Lobby) checkAgentID(id string) *protocol.Error {
	switch {
	case id == "":
		return protocol.Errorf(protocol.CodeInvalidMessage, `REGISTER needs "sender_id": the agent_id to register`)
	case id == l.cfg.LobbyID:
		return protocol.Errorf(protocol.CodeInvalidMessage, "agent_id %q is the lobby's own id", id)
	case strings.ContainsFunc(id, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }):
		return protocol.Errorf(protocol.CodeInvalidMessage, "agent_id %q must not contain whitespace or control characters", id)
	}
	if _, err := sign.ParseAgentID(id); err == nil {
		return protocol.Errorf(protocol.CodeInvalidMessage, "agent_id %q is a mesh agent id; a lobby agent needs a name of its own (mesh agents join the mesh directly)", id)
	}
	return nil
}

// register serves REGISTER.
func (l *Lobby) register(c *lobbyConn, m *LobbyMessage) {
	id := m.SenderID
	if pe := l.checkAgentID(id); pe != nil {
		l.sendError(c, m, pe)
		return
	}
	caps, pe := parseRegisterPayload(m.Payload)
	if pe != nil {
		l.sendError(c, m, pe)
		return
	}
	capsJSON, err := json.Marshal(caps)
	if err != nil {
		l.sendError(c, m, protocol.Errorf(protocol.CodeInvalidMessage, "capabilities: %v", err))
		return
	}
	l.mu.Lock()
	bound := c.agent
	l.mu.Unlock()
	if bound != "" && bound != id {
		l.sendError(c, m, protocol.Errorf(protocol.CodeInvalidMessage, "this connection serves agent %q; register %q on a connection of its own", bound, id))
		return
	}
	ctx, cancel := l.storeCtx(c)
	defer cancel()
	l.regMu.Lock()
	defer l.regMu.Unlock()
	stored := false
	_, err = l.st.Registration(ctx, id)
	switch {
	case err == nil:
		if m.AuthToken == "" {
			l.sendError(c, m, protocol.Errorf(protocol.CodeUnauthorized, "agent_id %q is already registered: send REGISTER with its auth_token to re-register, or any message with it to reconnect", id))
			return
		}
		reg, err := l.st.RegistrationByToken(ctx, m.AuthToken)
		if err != nil || reg.AgentID != id {
			l.sendError(c, m, protocol.Errorf(protocol.CodeUnauthorized, "Authentication failed: invalid auth_token for agent %q", id))
			return
		}
	case errors.Is(err, store.ErrNotFound):
		if pe := l.checkNewAgentID(id); pe != nil {
			c.log.Info("lobby registration refused", "agent", id, "err", pe.Message)
			l.sendError(c, m, pe)
			return
		}
		if l.registered >= l.cfg.MaxRegistrations {
			c.log.Warn("lobby registration refused: too many agents", "agent", id, "max", l.cfg.MaxRegistrations)
			l.sendError(c, m, protocol.Errorf(protocol.CodeRateLimited, "the lobby holds the most registrations it may (%d); try another lobby", l.cfg.MaxRegistrations))
			return
		}
		l.registered++ // taken back below if the write fails
		defer func() {
			if !stored {
				l.registered--
			}
		}()
	default:
		c.log.Error("lobby store lookup failed", "agent", id, "err", err)
		l.sendError(c, m, protocol.Errorf(protocol.CodeInternalError, "registration failed: store unavailable"))
		return
	}
	token := l.newToken()
	if err := l.st.Register(ctx, store.Registration{AgentID: id, Token: token, Capabilities: capsJSON}); err != nil {
		c.log.Error("lobby registration not stored", "agent", id, "err", err)
		code := protocol.CodeInternalError
		if errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrTooLarge) {
			code = protocol.CodeInvalidMessage
		}
		l.sendError(c, m, protocol.Errorf(code, "registration failed: %v", err))
		return
	}
	stored = true
	l.noteSkeleton(id)
	l.attach(c, id, caps)
	c.log.Info("lobby agent registered", "agent", id, "capabilities", len(caps))
	ack, _ := marshal(RegisterAckPayload{Status: RegisterStatus, LobbyID: l.cfg.LobbyID, AuthToken: token})
	_ = c.sendMsg(&LobbyMessage{SenderID: l.cfg.LobbyID, ReceiverID: id, MessageType: LobbyRegisterAck, Payload: ack, ConversationID: m.ConversationID})
}

// parseRegisterPayload reads and validates REGISTER's capabilities.
func parseRegisterPayload(payload json.RawMessage) ([]protocol.Capability, *protocol.Error) {
	members, _ := objectMembers(payload) // checked by ParseLobbyMessage
	var raw json.RawMessage
	for _, mb := range members {
		if mb.name == "capabilities" {
			raw = mb.raw
		}
	}
	caps := []protocol.Capability{}
	if len(raw) > 0 && !isNull(raw) {
		if raw[0] != '[' {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, `REGISTER payload: "capabilities" must be an array of capability objects`)
		}
		if err := json.Unmarshal(raw, &caps); err != nil {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "REGISTER payload: capabilities: %v", err)
		}
	}
	if len(caps) > MaxLobbyCapabilities {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "REGISTER payload: %d capabilities, the limit is %d", len(caps), MaxLobbyCapabilities)
	}
	seen := make(map[string]bool, len(caps))
	for i := range caps {
		if err := caps[i].Validate(); err != nil {
			pe := protocol.AsError(err)
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "REGISTER payload: %s", pe.Message)
		}
		if seen[caps[i].Name] {
			return nil, protocol.Errorf(protocol.CodeInvalidMessage, "REGISTER payload: capability %q is listed twice", caps[i].Name)
		}
		seen[caps[i].Name] = true
	}
	return caps, nil
}

// attach binds c to agent id with caps; a connection the agent was
// attached on before stops serving it.
func (l *Lobby) attach(c *lobbyConn, id string, caps []protocol.Capability) {
	l.mu.Lock()
	if a := l.agents[id]; a != nil && a.conn != c {
		a.conn.agent = ""
		a.conn.log.Info("lobby agent moved to another connection", "agent", id)
	}
	l.seq++
	l.agents[id] = &lobbyAgent{id: id, caps: caps, conn: c, seq: l.seq}
	c.agent = id
	c.established = true
	l.admit.establish(c.ticket)
	l.mu.Unlock()
	l.notifyChange()
}

// authenticate checks m's auth_token against its sender_id and binds c to
// the agent if it is not yet (re-attaching after a reconnect or a relay
// restart). It returns the agent id.
func (l *Lobby) authenticate(c *lobbyConn, m *LobbyMessage) (string, *protocol.Error) {
	if m.AuthToken == "" {
		return "", protocol.Errorf(protocol.CodeUnauthorized, "Authentication failed: %s needs the sender's auth_token (from REGISTER_ACK)", m.MessageType)
	}
	if m.SenderID == "" {
		return "", protocol.Errorf(protocol.CodeUnauthorized, `Authentication failed: "sender_id" is required`)
	}
	ctx, cancel := l.storeCtx(c)
	defer cancel()
	reg, err := l.st.RegistrationByToken(ctx, m.AuthToken)
	switch {
	case errors.Is(err, store.ErrNotFound) || (err == nil && reg.AgentID != m.SenderID):
		return "", protocol.Errorf(protocol.CodeUnauthorized, "Authentication failed: invalid auth_token for sender_id %q", m.SenderID)
	case err != nil:
		c.log.Error("lobby store lookup failed", "err", err)
		return "", protocol.Errorf(protocol.CodeInternalError, "authentication failed: store unavailable")
	}
	l.mu.Lock()
	bound := c.agent
	l.mu.Unlock()
	switch bound {
	case reg.AgentID:
		return reg.AgentID, nil
	case "":
	default:
		return "", protocol.Errorf(protocol.CodeUnauthorized, "this connection serves agent %q; use a connection per agent", bound)
	}
	var caps []protocol.Capability
	if len(reg.Capabilities) > 0 {
		if err := json.Unmarshal(reg.Capabilities, &caps); err != nil {
			c.log.Error("stored capabilities unreadable", "agent", reg.AgentID, "err", err)
			return "", protocol.Errorf(protocol.CodeInternalError, "stored registration of %q is unreadable; REGISTER again", reg.AgentID)
		}
	}
	l.attach(c, reg.AgentID, caps)
	c.log.Info("lobby agent attached", "agent", reg.AgentID)
	return reg.AgentID, nil
}

// capabilityName reads and validates a payload's capability_name.
func capabilityName(payload json.RawMessage, msgType string) ([]lobbyMember, string, *protocol.Error) {
	members, _ := objectMembers(payload) // checked by ParseLobbyMessage
	name, _, err := payloadString(members, "capability_name")
	if err != nil {
		return nil, "", protocol.AsError(err)
	}
	if name == "" {
		return nil, "", protocol.Errorf(protocol.CodeInvalidMessage, `%s payload needs "capability_name"`, msgType)
	}
	if err := (&protocol.Capability{Name: name}).Validate(); err != nil {
		return nil, "", protocol.Errorf(protocol.CodeInvalidMessage, "%s payload: %s", msgType, protocol.AsError(err).Message)
	}
	return members, name, nil
}

func busy(c *lobbyConn) *protocol.Error {
	return protocol.Errorf(protocol.CodeRateLimited, "busy: %d requests already in flight on this connection", cap(c.slots))
}

// request serves REQUEST.
func (l *Lobby) request(c *lobbyConn, m *LobbyMessage, agent string) {
	members, name, pe := capabilityName(m.Payload, LobbyRequest)
	if pe != nil {
		l.sendError(c, m, pe)
		return
	}
	if m.ReceiverID == "" {
		l.sendError(c, m, protocol.Errorf(protocol.CodeInvalidMessage, `REQUEST needs "receiver_id": the agent to call`))
		return
	}
	conv := m.ConversationID
	if conv == "" {
		conv = protocol.NewID()
	}
	if !c.spawn(func() { l.route(c, agent, m, name, members, conv) }) {
		l.sendError(c, m, busy(c))
	}
}

// route delivers a REQUEST to a lobby agent or a mesh agent and sends the
// requester the RESPONSEs.
func (l *Lobby) route(c *lobbyConn, agent string, m *LobbyMessage, name string, members []lobbyMember, conv string) {
	receiver := m.ReceiverID
	reply := func(from string, payload json.RawMessage) {
		_ = c.sendMsg(&LobbyMessage{SenderID: from, ReceiverID: agent, MessageType: LobbyResponse, Payload: payload, ConversationID: conv})
	}
	fail := func(pe *protocol.Error) {
		c.log.Debug("request failed", "receiver", receiver, "capability", name, "code", pe.Code, "err", pe.Message)
		reply(l.cfg.LobbyID, errorPayload(pe))
	}
	ctx, cancel := context.WithTimeout(c.ctx, l.cfg.RequestTimeout)
	defer cancel()

	if receiver == l.cfg.LobbyID {
		fail(protocol.Errorf(protocol.CodeCapabilityNotSupported, "the lobby itself offers no capabilities; send REQUEST to an agent"))
		return
	}
	l.mu.Lock()
	connected := l.agents[receiver] != nil
	l.mu.Unlock()
	if connected {
		res, pe := l.forward(ctx, receiver, agent, conv, name, m.Payload, func(p json.RawMessage) { reply(receiver, p) })
		if pe != nil {
			fail(pe)
			return
		}
		reply(receiver, res)
		return
	}
	sctx, scancel := l.storeCtx(c)
	_, err := l.st.Registration(sctx, receiver)
	scancel()
	if err == nil {
		fail(protocol.Errorf(protocol.CodeUnknownAgent, "agent %q is registered but not connected to the lobby", receiver))
		return
	}
	id, perr := sign.ParseAgentID(receiver)
	if perr != nil {
		fail(protocol.Errorf(protocol.CodeUnknownAgent, "no agent %q: it is not connected to the lobby and is not a mesh agent id", receiver))
		return
	}
	l.callMesh(ctx, agent, id.String(), name, members, func(p json.RawMessage) { reply(receiver, p) }, fail)
}

// callMesh calls a mesh agent for lobby agent client, vouching for it.
// answer receives each RESPONSE payload (in_progress ones, then the final
// one); fail receives a failure of the lobby's own.
func (l *Lobby) callMesh(ctx context.Context, client, to, name string, members []lobbyMember, answer func(json.RawMessage), fail func(*protocol.Error)) {
	var mu sync.Mutex
	done := false
	defer func() {
		mu.Lock()
		done = true
		mu.Unlock()
		if p := recover(); p != nil {
			l.log.Error("mesh call panicked", "to", to, "capability", name, "panic", p)
			fail(protocol.Errorf(protocol.CodeInternalError, "internal error"))
		}
	}()
	req := protocol.CallRequest{
		To:         to,
		Action:     name,
		Params:     buildObject(nil, members, "capability_name"),
		Timeout:    l.cfg.RequestTimeout,
		OnBehalfOf: LobbyClientPrefix + client,
		Progress: func(r *protocol.Response) {
			mu.Lock()
			defer mu.Unlock()
			if done || r == nil {
				return
			}
			answer(statusPayload(protocol.StatusInProgress, r.Result))
		},
	}
	resp, err := l.mesh.Call(ctx, req)
	mu.Lock()
	done = true
	mu.Unlock()
	switch {
	case err != nil:
		answer(errorPayload(protocol.AsError(err)))
	case resp == nil:
		fail(protocol.Errorf(protocol.CodeInternalError, "the mesh returned no response"))
	default:
		status := resp.Status
		if status == "" || status == protocol.StatusInProgress {
			status = protocol.StatusSuccess
		}
		answer(statusPayload(status, resp.Result))
	}
}

// statusPayload builds a RESPONSE payload from a mesh result: an object's
// members follow "status"; any other value goes under "result".
func statusPayload(status protocol.Status, result json.RawMessage) json.RawMessage {
	first := []lobbyMember{{name: "status", raw: json.RawMessage(strconvQuote(string(status)))}}
	r := trimJSONSpace(result)
	if len(r) == 0 || isNull(r) {
		return buildObject(first, nil)
	}
	if r[0] == '{' {
		if members, err := objectMembers(r); err == nil {
			return buildObject(first, members, "status")
		}
	}
	return buildObject(append(first, lobbyMember{name: "result", raw: r}), nil)
}

// errorPayload is a RESPONSE payload with status "error".
func errorPayload(pe *protocol.Error) json.RawMessage {
	p := LobbyErrorResponse{Status: protocol.StatusError, Error: pe.Message, Code: pe.Code}
	if p.Error == "" {
		p.Error = string(pe.Code)
	}
	if len(pe.Details) > 0 && json.Valid(pe.Details) {
		p.Details = pe.Details
	}
	b, err := marshal(p)
	if err != nil {
		return json.RawMessage(`{"status":"error","error":"internal error","code":"INTERNAL_ERROR"}`)
	}
	return b
}

// response serves a RESPONSE from a provider: it is routed to the REQUEST
// it answers, or refused.
func (l *Lobby) response(c *lobbyConn, m *LobbyMessage, agent string) {
	members, _ := objectMembers(m.Payload)
	status, _, err := payloadString(members, "status")
	if err != nil || status == "" {
		l.sendError(c, m, protocol.Errorf(protocol.CodeInvalidMessage, `RESPONSE payload needs a "status" string`))
		return
	}
	if !l.settle(agent, m.ReceiverID, m.ConversationID, m.Payload, status != string(protocol.StatusInProgress)) {
		l.sendError(c, m, protocol.Errorf(protocol.CodeInvalidMessage, "no REQUEST from %q with conversation_id %q is waiting for a RESPONSE from %q", m.ReceiverID, m.ConversationID, agent))
	}
}

// settle hands a RESPONSE payload to the REQUEST it answers, and reports
// whether there was one.
func (l *Lobby) settle(provider, requester, conv string, payload json.RawMessage, final bool) bool {
	key := pendingKey{provider: provider, requester: normalizeAgentID(requester), conv: conv}
	l.mu.Lock()
	p := l.pending[key]
	if p != nil && final {
		delete(l.pending, key)
	}
	l.mu.Unlock()
	switch {
	case p == nil:
		return false
	case final:
		p.done <- payload // buffered; the entry was removed, so only once
	case p.progress != nil:
		p.progress(payload)
	}
	return true
}

// agentError serves an ERROR an agent sends: if it concerns a pending
// REQUEST, that REQUEST ends with a RESPONSE with status "error";
// otherwise it is dropped. It is never answered.
func (l *Lobby) agentError(c *lobbyConn, m *LobbyMessage, agent string) {
	members, _ := objectMembers(m.Payload)
	text, _, _ := payloadString(members, "error")
	if text == "" {
		text = "the agent reported an error"
	}
	pe := protocol.Errorf(protocol.CodeInternalError, "%s", text)
	if code, _, _ := payloadString(members, "code"); protocol.Code(code).Valid() {
		pe.Code = protocol.Code(code)
	}
	if !l.settle(agent, m.ReceiverID, m.ConversationID, errorPayload(pe), true) {
		c.log.Debug("dropped an ERROR from an agent", "agent", agent, "receiver", m.ReceiverID, "error", text)
	}
}
