package wsconn

import (
	"net"
	"net/http"
	"net/url"
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

// SameLoopbackOrigin reports whether a WebSocket request comes from a
// page served by the same listener, on a loopback address: its Origin is
// http://HOST[:PORT] where HOST[:PORT] is the request's Host and HOST is
// a loopback IP or "localhost". Such a page can only come from whoever
// listens on that loopback port, that is from the server itself. A
// same-origin check alone would not do: after DNS rebinding a hostile
// page's origin and Host both name the attacker's domain, which is not a
// loopback literal; and a page of another local server has another port.
func SameLoopbackOrigin(r *http.Request) bool {
	o, err := url.Parse(r.Header.Get("Origin"))
	if err != nil || o.Scheme != "http" || o.Host == "" || o.Path != "" || o.User != nil {
		return false
	}
	if !strings.EqualFold(o.Host, r.Host) {
		return false
	}
	host := o.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// LocalHost reports whether a request's Host header names this machine
// in a way DNS rebinding cannot forge: an IP address literal (a
// rebinding page reaches a loopback port under the attacker's domain
// name, never under an IP), or "localhost" (any case, with a trailing
// dot or not). Its port, if any, is not looked at. An empty Host (an
// HTTP/1.0 request) is refused.
func LocalHost(r *http.Request) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if host == "" {
		return false
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") {
		return true
	}
	if i := strings.IndexByte(host, '%'); i > 0 { // an IPv6 zone
		host = host[:i]
	}
	return net.ParseIP(host) != nil
}
