package node

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// rateLimiters holds one token bucket per requester. When it reaches
// maxRequesters it forgets buckets that have refilled, which loses nothing
// (a full bucket is the state a new one starts in). A hard-capped one
// (for vouched clients, whose names the vouching agent chooses) then
// refuses new requesters instead of growing past maxRequesters.
type rateLimiters struct {
	limit rate.Limit
	burst int
	hard  bool

	mu sync.Mutex
	m  map[string]*rate.Limiter
}

const maxRequesters = 8192

func newRateLimiters(perSecond float64, burst int) *rateLimiters {
	if perSecond <= 0 {
		return &rateLimiters{limit: rate.Inf}
	}
	return &rateLimiters{limit: rate.Limit(perSecond), burst: burst, m: make(map[string]*rate.Limiter)}
}

// allow takes one token from p's bucket.
func (r *rateLimiters) allow(p peer.ID) bool { return r.allowKey(string(p)) }

// allowKey takes one token from the bucket of the requester named key.
func (r *rateLimiters) allowKey(key string) bool {
	if r.limit == rate.Inf {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := r.m[key]
	if !ok {
		if len(r.m) >= maxRequesters {
			now := time.Now()
			for id, old := range r.m {
				if old.TokensAt(now) >= float64(r.burst) {
					delete(r.m, id)
				}
			}
			if r.hard && len(r.m) >= maxRequesters {
				return false
			}
		}
		l = rate.NewLimiter(r.limit, r.burst)
		r.m[key] = l
	}
	return l.Allow()
}
