package rpc

import "github.com/coder/websocket"

// claimClientID makes c the holder of a bus client id. An id held by
// another live connection is refused (CodeAlreadyInitialized), unless
// both connections present the same credential: then the new connection
// replaces the old one, which is closed (a client that reconnects before
// the relay has noticed its old connection died is not locked out). The
// local API has no credentials, so there an id is never taken over. The
// id is released when c ends.
func (s *Server) claimClientID(c *Conn, id string) error {
	s.mu.Lock()
	old := s.clientIDs[id]
	if old != nil && old != c && old.Context().Err() == nil {
		oc, nc := old.Credential(), c.Credential()
		if oc == nil || nc == nil || oc.Name != nc.Name || oc.set != nc.set {
			s.mu.Unlock()
			return &Error{Code: CodeAlreadyInitialized,
				Message: "client id " + quote(id) + " is in use by a live connection",
				Data:    []byte(`{"reason":"clientIdInUse"}`)}
		}
	} else {
		old = nil
	}
	s.clientIDs[id] = c
	s.mu.Unlock()
	if old != nil {
		old.log.Info("connection replaced by a new one with the same client id and credential", "client_id", id)
		old.shut(websocket.StatusPolicyViolation, "replaced by a new connection with the same client id")
	}
	c.AfterClose(func() {
		s.mu.Lock()
		if s.clientIDs[id] == c {
			delete(s.clientIDs, id)
		}
		s.mu.Unlock()
	})
	return nil
}

func quote(s string) string {
	b, _ := marshal(s)
	return string(b)
}
