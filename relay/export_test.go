package relay

import "time"

// SetClock replaces the server's clock (ping's timestamp). Call it before
// serving.
func SetClock(s *Server, now func() time.Time) { s.now = now }
