package wsconn

import (
	"net"
	"net/http"
	"net/netip"
	"slices"
)

// admission decides which WebSocket connections a Hub takes, so that a
// new honest client always gets in while idle, unauthenticated
// connections hold the slots:
//
//   - A connection is "waiting" from its arrival until it establishes
//     itself (Conn.Establish).
//   - A listener that is full evicts its oldest waiting connection to
//     make room, and refuses (HTTP 503) only when every slot holds an
//     established one.
//   - An address (IP) over Limits.MaxClientsPerIP evicts its own oldest
//     waiting connection, or is refused (HTTP 429) when all of its
//     connections are established. Limits.PerIPExempt (loopback by
//     default) is not counted per address.
//
// It holds no lock of its own: the Hub calls it under Hub.mu.
type admission struct {
	limits  Limits
	total   int
	perIP   map[netip.Addr]int
	waiting []*ticket // not yet established, oldest first
}

// ticket is one admitted connection's place. Its fields are guarded by
// Hub.mu.
type ticket struct {
	ip          netip.Addr // the zero Addr when not counted per address
	evict       func(reason string)
	established bool
	released    bool
}

func newAdmission(l Limits) *admission {
	return &admission{limits: l, perIP: make(map[netip.Addr]int)}
}

// Close reasons sent to evicted clients (a WebSocket close reason holds at
// most 123 bytes).
const (
	reasonEvictedFull  = "evicted: server full and this connection never initialized"
	reasonEvictedPerIP = "evicted: too many connections from this address, this one never initialized"
)

// take admits a connection from remote (host:port), evicting a waiting
// connection if that is what it takes. evict is called (under
// Hub.mu; it must not take that mutex) if this connection is
// evicted later. It returns nil and the HTTP status of the refusal when
// the connection is refused.
func (a *admission) take(remote string, evict func(reason string)) (*ticket, int) {
	ip := a.countedIP(remote)
	if ip.IsValid() && a.perIP[ip] >= a.limits.MaxClientsPerIP {
		if !a.evictOldest(func(t *ticket) bool { return t.ip == ip }, reasonEvictedPerIP) {
			return nil, http.StatusTooManyRequests
		}
	}
	if a.total >= a.limits.MaxClients {
		if !a.evictOldest(nil, reasonEvictedFull) {
			return nil, http.StatusServiceUnavailable
		}
	}
	t := &ticket{ip: ip, evict: evict}
	a.total++
	if ip.IsValid() {
		a.perIP[ip]++
	}
	a.waiting = append(a.waiting, t)
	return t, 0
}

// countedIP returns the address remote counts against, or the zero Addr
// when it is exempt or unparsable.
func (a *admission) countedIP(remote string) netip.Addr {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}
	}
	ip = ip.Unmap().WithZone("")
	for _, p := range a.limits.PerIPExempt {
		if p.Contains(ip) {
			return netip.Addr{}
		}
	}
	return ip
}

// evictOldest releases the oldest waiting ticket that match accepts (all
// when match is nil) and tells its connection to go. It reports whether
// there was one.
func (a *admission) evictOldest(match func(*ticket) bool, reason string) bool {
	for _, t := range a.waiting {
		if match == nil || match(t) {
			a.release(t)
			t.evict(reason)
			return true
		}
	}
	return false
}

// establish marks t's connection as established: it is no longer evicted
// to make room.
func (a *admission) establish(t *ticket) {
	if t.established || t.released {
		return
	}
	t.established = true
	a.dropWaiting(t)
}

// release gives t's slot back; later calls do nothing.
func (a *admission) release(t *ticket) {
	if t.released {
		return
	}
	t.released = true
	a.total--
	if t.ip.IsValid() {
		if a.perIP[t.ip]--; a.perIP[t.ip] <= 0 {
			delete(a.perIP, t.ip)
		}
	}
	if !t.established {
		a.dropWaiting(t)
	}
}

func (a *admission) dropWaiting(t *ticket) {
	if i := slices.Index(a.waiting, t); i >= 0 {
		a.waiting = slices.Delete(a.waiting, i, i+1)
	}
}
