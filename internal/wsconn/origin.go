package wsconn

import (
	"net/http"
	"path"
	"slices"
	"strings"
)

// OriginAllowed reports whether a WebSocket request may connect under
// patterns. A request without an Origin header (the CLI, agents in any
// language) is always allowed. One with an Origin comes from a browser
// page and is allowed only if the origin matches a pattern: a pattern is
// matched (path.Match, case-insensitive) against the origin's
// host[:port], or against scheme://host[:port] if it contains "://"; "*"
// allows every origin.
func OriginAllowed(patterns []string, r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	if slices.Contains(patterns, "*") {
		return true
	}
	i := strings.Index(origin, "://")
	if i <= 0 || i+3 >= len(origin) {
		return false
	}
	host := strings.ToLower(origin[i+3:])
	full := strings.ToLower(origin)
	for _, p := range patterns {
		p = strings.ToLower(p)
		target := host
		if strings.Contains(p, "://") {
			target = full
		}
		if ok, _ := path.Match(p, target); ok {
			return true
		}
	}
	return false
}
