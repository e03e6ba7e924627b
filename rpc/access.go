package rpc

import (
	"net/http"

	"github.com/coder/websocket"
)

// One Server, with one set of methods, is served on every listener of a
// process: the loopback local API (ServeHTTP, Start, Serve) and a
// relay's public listener (PublicHandler). Each connection carries the
// rules of the listener it came through.

// access is what the connections of one listener may do.
type access struct {
	// public: only initialize, ping and the HandlePublic methods, unless
	// cred grants more.
	public bool
	// cred is the credential the public listener's Tokens authenticated;
	// nil for an anonymous client.
	cred *Credential
}

type accessKey struct{}

var localAccess = &access{}

// PublicHandler returns the handler of a public listener (API at "/"):
// the same methods and connections as the server's own listeners, with
// these rules for its clients. Anyone may initialize, ping, and call the
// methods registered with HandlePublic (the bus's subscribe, unsubscribe
// and sendMessage); every other method (bus.history, mesh.*, …) needs a
// credential that grants it (CodeForbidden otherwise). What a method
// does with the topics it is given is the method's to check, with the
// connection's Credential (AllowsPattern, AllowsTopic). To require a
// credential, wrap the handler (with the lobby's) in Tokens.Middleware;
// without it every client is anonymous.
func (s *Server) PublicHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		s.serveAPI(w, r, &access{public: true, cred: CredentialFromContext(r.Context())})
	})
}

// Credential returns the credential the connection authenticated with on
// a public listener, or nil (an anonymous client, or the local API).
// Its Name tells the relay's clients apart.
func (c *Conn) Credential() *Credential { return accessOf(c).cred }

// Public reports whether the connection came through a public listener.
func (c *Conn) Public() bool { return accessOf(c).public }

func accessOf(c *Conn) *access {
	if a, ok := c.Value(accessKey{}).(*access); ok {
		return a
	}
	return localAccess
}

// DropRevoked closes every connection whose credential's token is no
// longer in its Tokens (after Tokens.Reload), with close status 1008
// "credential revoked", and returns how many it closed. Without it such a
// connection is closed on its next request.
func (s *Server) DropRevoked() int {
	s.mu.Lock()
	var revoked []*Conn
	for c := range s.conns {
		if cred := accessOf(c).cred; cred != nil && cred.Current() == nil {
			revoked = append(revoked, c)
		}
	}
	s.mu.Unlock()
	for _, c := range revoked {
		c.log.Info("credential revoked; client disconnected", "credential", accessOf(c).cred.Name)
		c.shut(websocket.StatusPolicyViolation, "credential revoked")
	}
	return len(revoked)
}

// allow applies the listener's rules to a request before its handler
// runs. Everything but initialize needs initialize first (seed 001), on
// every listener.
func (s *Server) allow(r *Request) error {
	if r.Method == MethodInitialize {
		return nil
	}
	if r.Conn.ClientID() == "" {
		return Errorf(CodeNotInitialized, "not initialized: send initialize first (seed 001)")
	}
	a := accessOf(r.Conn)
	if !a.public {
		return nil
	}
	cred := a.cred
	if cred != nil {
		if cred = cred.Current(); cred == nil {
			// The close frame says why; the request gets no answer.
			r.Conn.log.Info("credential revoked; client disconnected", "credential", a.cred.Name)
			r.Conn.shut(websocket.StatusPolicyViolation, "credential revoked")
			return Errorf(CodeForbidden, "forbidden: the credential %q has been revoked", a.cred.Name)
		}
	}
	s.hmu.RLock()
	public, local := s.public[r.Method], s.local[r.Method]
	s.hmu.RUnlock()
	if local {
		return Errorf(CodeMethodNotFound, "method not found: %s is served on the node's local API only", r.Method)
	}
	if !public && !cred.AllowsMethod(r.Method) {
		if cred == nil {
			return Errorf(CodeForbidden, "forbidden: %s is not served to anonymous clients of a public listener; use the local API or a token that grants it", r.Method)
		}
		return Errorf(CodeForbidden, "forbidden: the credential %q does not grant %s", cred.Name, r.Method)
	}
	return nil
}
