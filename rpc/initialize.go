package rpc

import (
	"context"
	"encoding/json"
	"strings"

	"github.com/meshagent/meshagent/protocol"
)

// MethodInitialize is seed 001's handshake. It comes first on every
// listener: until a connection has initialized, the server answers
// nothing else (CodeNotInitialized).
const MethodInitialize = "initialize"

// InitializeParams are initialize's params (seed 001).
type InitializeParams struct {
	ClientID   string     `json:"clientId"`
	ClientInfo ClientInfo `json:"clientInfo"`
}

// ClientInfo names a client's (or the server's) software.
type ClientInfo struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
}

// InitializeResult is initialize's result (seed 001).
type InitializeResult struct {
	ServerID     string          `json:"serverId"`
	ServerInfo   ClientInfo      `json:"serverInfo"`
	Capabilities BusCapabilities `json:"capabilities"`
}

// BusCapabilities are what initialize announces of the seed 001 bus
// (Server.SetCapabilities).
type BusCapabilities struct {
	Subscribe bool     `json:"subscribe"`
	Publish   bool     `json:"publish"`
	Topics    []string `json:"topics"`
}

// maxClientID bounds a clientId, in bytes.
const maxClientID = 256

// initialize serves the handshake: it validates the params, claims the
// clientId for the connection (see claimClientID) and establishes it.
func (s *Server) initialize(_ context.Context, r *Request) (any, error) {
	c := r.Conn
	p, err := parseInitializeParams(r.Params)
	if err != nil {
		return nil, err
	}
	// initMu makes the check and the claim one step: two initialize
	// requests racing on one connection cannot both succeed.
	c.initMu.Lock()
	defer c.initMu.Unlock()
	if id := c.ClientID(); id != "" {
		return nil, Errorf(CodeAlreadyInitialized, "already initialized as %q", id)
	}
	if err := s.claimClientID(c, p.ClientID); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.clientID = p.ClientID
	c.mu.Unlock()
	return InitializeResult{
		ServerID:     s.mesh.AgentID(),
		ServerInfo:   ClientInfo{Name: "meshagent-bus", Version: protocol.HelloVersion},
		Capabilities: s.capabilities(),
	}, nil
}

func (s *Server) capabilities() BusCapabilities {
	s.hmu.RLock()
	defer s.hmu.RUnlock()
	c := s.caps
	if c.Topics == nil {
		c.Topics = []string{}
	}
	return c
}

// ClientID returns the clientId the connection initialized with, or ""
// before a successful initialize.
func (c *Conn) ClientID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.clientID
}

// parseInitializeParams decodes initialize's params (DecodeMembers) and
// checks them, answering CodeInvalidClientInfo as seed 001 says.
func parseInitializeParams(raw json.RawMessage) (InitializeParams, error) {
	var p InitializeParams
	badID := Errorf(CodeInvalidClientInfo, `invalid client info: "clientId" must be a non-empty string of at most %d bytes`, maxClientID)
	badInfo := Errorf(CodeInvalidClientInfo, `invalid client info: "clientInfo" must be {"name": string, "version": string}`)
	if len(raw) == 0 || raw[0] != '{' {
		return p, Errorf(CodeInvalidClientInfo, `invalid client info: initialize takes {"clientId", "clientInfo": {"name", "version"}}`)
	}
	if fe := DecodeMembers(raw, &p); fe != nil {
		switch {
		case fe.Err == protocol.ErrSyntax:
			return p, Errorf(CodeInvalidClientInfo, `invalid client info: initialize takes {"clientId", "clientInfo": {"name", "version"}}`)
		case under(fe, "clientInfo"):
			return p, badInfo
		case fe.Err == protocol.ErrUnknownMember:
			return p, Errorf(CodeInvalidClientInfo, "invalid client info: unknown field %q", fe.Name())
		}
		return p, badID
	}
	if p.ClientID == "" || len(p.ClientID) > maxClientID || strings.ContainsRune(p.ClientID, 0) {
		return p, badID
	}
	if p.ClientInfo.Name == "" {
		// clientInfo is optional, but one given (even null or {}) needs a
		// name: look again for whether it was there.
		var given struct {
			ClientInfo json.RawMessage `json:"clientInfo"`
		}
		if protocol.DecodeStrict(raw, &given, protocol.AllowUnknown()) != nil || given.ClientInfo != nil {
			return p, badInfo
		}
	}
	return p, nil
}
