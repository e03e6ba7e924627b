package rpc

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Control is what a node's operator may do through the node's own local
// API, beyond using the mesh: read its listen addresses and status, dial a
// peer, change its log level. A server serves mesh.connect, mesh.logLevel
// and mesh.status, and adds addresses to mesh.id, only when it was given a
// Control (WithControl). Give one only to a server on loopback, never to a
// relay's public listener. Implementations must be safe for concurrent
// use.
type Control interface {
	// Addrs returns the node's listen multiaddrs, each ending in
	// /p2p/<agent id>.
	Addrs() []string
	// Connect dials the peer at addr, a multiaddr ending in
	// /p2p/<agent id>, and returns the peer's agent id once connected,
	// and already true when the node had a connection to it before (then
	// addr is not dialled: libp2p keeps the connection it has). An addr
	// that does not parse is an error wrapping ErrInvalidAddr; an
	// unreachable peer is a *protocol.Error with code UNKNOWN_AGENT.
	// Connect returns when ctx ends.
	Connect(ctx context.Context, addr string) (id string, already bool, err error)
	// LogLevel returns the process's log level: debug, info, warn or
	// error.
	LogLevel() string
	// SetLogLevel changes the process's log level. A level that is none of
	// the four is an error.
	SetLogLevel(level string) error
	// SubscribeTaskEvents calls fn, which must not block, for each event
	// of a task the node serves, until cancel is called: mesh.taskEvents.
	SubscribeTaskEvents(fn func(protocol.TaskChange)) (cancel func(), err error)
	// Capabilities returns the capabilities the node serves itself, in
	// full, sorted by name (nil: none): mesh.capabilities, and the names
	// in mesh.status.
	Capabilities() []protocol.Capability
}

// Method names of the operator's control, served with a Control only.
const (
	MethodMeshConnect  = "mesh.connect"
	MethodMeshLogLevel = "mesh.logLevel"
	MethodMeshStatus   = "mesh.status"
)

// Control bounds.
const (
	// DefaultConnectTimeout bounds mesh.connect unless timeoutMs says
	// otherwise; MaxConnectTimeout caps timeoutMs.
	DefaultConnectTimeout = 15 * time.Second
	MaxConnectTimeout     = 2 * time.Minute
	// maxAddrLen bounds mesh.connect's addr.
	maxAddrLen = 1024
)

// ConnectParams are the params of mesh.connect.
type ConnectParams struct {
	// Addr is the peer's multiaddr, ending in /p2p/<agent id>.
	Addr string `json:"addr"`
	// TimeoutMS bounds the dial; 0 means DefaultConnectTimeout.
	TimeoutMS int64 `json:"timeoutMs,omitempty"`
}

// ConnectResult is the result of mesh.connect.
type ConnectResult struct {
	AgentID string `json:"agentId"`
	Addr    string `json:"addr"`
	// AlreadyConnected is set when the node had a connection to the peer
	// before: Addr was not dialled.
	AlreadyConnected bool `json:"alreadyConnected,omitempty"`
}

// LogLevelParams are the params of mesh.logLevel: without Level it only
// reads the current level.
//
// Level is required once params are given ({} or no params is a read), so
// it is tagged both omitempty, for clients, and required, for the server.
type LogLevelParams struct {
	Level string `json:"level,omitempty,required"`
}

// LogLevelResult is the result of mesh.logLevel: the level before and
// after the call.
type LogLevelResult struct {
	Previous string `json:"previous"`
	Level    string `json:"level"`
}

// StatusResult is the result of mesh.status: a summary of the node and of
// the server in front of it.
type StatusResult struct {
	AgentID   string   `json:"agentId"`
	PublicKey string   `json:"publicKey"`
	Addrs     []string `json:"addrs"`
	LogLevel  string   `json:"logLevel"`
	// Capabilities are the names of the capabilities this node serves.
	Capabilities []string `json:"capabilities"`
	// Peers are the agents the node knows, as mesh.peers returns them.
	Peers []protocol.PeerInfo `json:"peers"`
	// BusClients is how many WebSocket clients this server holds besides
	// the one asking.
	BusClients int `json:"busClients"`
	// Topics are the distinct patterns the bus's clients subscribe to.
	Topics []string `json:"topics"`
	// BusSubscriptions counts the bus's subscriptions (with duplicates of
	// a pattern from several clients).
	BusSubscriptions int `json:"busSubscriptions"`
}

// WithControl serves the operator's methods (mesh.connect, mesh.logLevel,
// mesh.status, mesh.capabilities, mesh.taskEvents) through c, and adds the node's addresses to mesh.id. Use it
// only for a node's loopback local API.
func WithControl(c Control) Option {
	return func(cfg *Config) error {
		if c == nil {
			return errors.New("nil Control")
		}
		cfg.Control = c
		return nil
	}
}

func (s *Server) registerControlMethods() {
	if s.cfg.Control == nil {
		return
	}
	s.HandleLocal(MethodMeshConnect, s.meshConnect)
	s.HandleLocal(MethodMeshLogLevel, s.meshLogLevel)
	s.HandleLocal(MethodMeshStatus, s.meshStatus)
	s.HandleLocal(MethodMeshCapabilities, s.meshCapabilities)
	s.registerTaskEvents()
}

func (s *Server) meshConnect(ctx context.Context, r *Request) (any, error) {
	var p ConnectParams
	if err := connectShape.decode(r.Params, &p); err != nil {
		return nil, err
	}
	addr := p.Addr
	switch {
	case addr == "":
		return nil, Errorf(CodeInvalidParams, `invalid params: "addr" is required (a multiaddr ending in /p2p/<agent id>)`)
	case len(addr) > maxAddrLen:
		return nil, Errorf(CodeInvalidParams, `invalid params: "addr" is longer than %d bytes`, maxAddrLen)
	}
	timeout := DefaultConnectTimeout
	switch {
	case p.TimeoutMS < 0 || p.TimeoutMS > MaxConnectTimeout.Milliseconds():
		return nil, connectTimeoutError()
	case p.TimeoutMS > 0:
		timeout = time.Duration(p.TimeoutMS) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	id, already, err := s.cfg.Control.Connect(ctx, addr)
	if errors.Is(err, ErrInvalidAddr) {
		return nil, Errorf(CodeInvalidParams, `invalid params: "addr": %s`, strings.TrimPrefix(err.Error(), ErrInvalidAddr.Error()+": "))
	}
	if err != nil {
		return nil, protocol.AsError(err)
	}
	return ConnectResult{AgentID: id, Addr: addr, AlreadyConnected: already}, nil
}

func (s *Server) meshLogLevel(_ context.Context, r *Request) (any, error) {
	prev := s.cfg.Control.LogLevel()
	if NoParams(r) == nil {
		return LogLevelResult{Previous: prev, Level: prev}, nil // a read
	}
	var p LogLevelParams
	if err := logLevelShape.decode(r.Params, &p); err != nil {
		return nil, err
	}
	if err := nonEmpty("level", p.Level); err != nil {
		return nil, err
	}
	level := p.Level
	if err := s.cfg.Control.SetLogLevel(level); err != nil {
		return nil, Errorf(CodeInvalidParams, `invalid params: "level": %v`, err)
	}
	now := s.cfg.Control.LogLevel()
	s.log.Info("log level changed", "from", prev, "to", now)
	return LogLevelResult{Previous: prev, Level: now}, nil
}

func (s *Server) meshStatus(_ context.Context, r *Request) (any, error) {
	if err := NoParams(r); err != nil {
		return nil, err
	}
	res := StatusResult{
		AgentID:      s.mesh.AgentID(),
		PublicKey:    publicKeyOf(s.mesh.AgentID()),
		Addrs:        orEmpty(s.cfg.Control.Addrs()),
		LogLevel:     s.cfg.Control.LogLevel(),
		Capabilities: []string{},
		Peers:        s.mesh.Peers(),
		BusClients:   s.Clients(),
	}
	if r.Conn != nil && res.BusClients > 0 {
		res.BusClients-- // the client asking is no client of the bus
	}
	if res.Peers == nil {
		res.Peers = []protocol.PeerInfo{}
	}
	for _, c := range s.cfg.Control.Capabilities() {
		res.Capabilities = append(res.Capabilities, c.Name)
	}
	s.hmu.RLock()
	hooks := s.onStatus
	s.hmu.RUnlock()
	for _, f := range hooks {
		f(&res)
	}
	if res.Topics == nil {
		res.Topics = []string{}
	}
	return res, nil
}

var (
	connectShape = func() paramShape {
		s := objectShape(MethodMeshConnect, &ConnectParams{})
		s.member = func(fe *protocol.FieldError) error {
			if under(fe, "timeoutMs") {
				return connectTimeoutError()
			}
			return nil
		}
		return s
	}()
	logLevelShape = objectShape(MethodMeshLogLevel, &LogLevelParams{})
)

func connectTimeoutError() error {
	return Errorf(CodeInvalidParams, `invalid params: "timeoutMs" must be a whole number of milliseconds from 0 to %d`, MaxConnectTimeout.Milliseconds())
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// publicKeyOf returns the base64 Ed25519 public key inlined in an agent
// id, or "" if it has none.
func publicKeyOf(agentID string) string {
	id, err := sign.ParseAgentID(agentID)
	if err != nil {
		return ""
	}
	pub, err := sign.PublicKeyBase64(id)
	if err != nil {
		return ""
	}
	return pub
}
