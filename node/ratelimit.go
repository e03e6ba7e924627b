package node

import (
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
)

// rateLimiters holds one token bucket per requester. It is bounded: when
// it reaches maxRequesters it forgets buckets that have refilled, which
// loses nothing (a full bucket is the state a new one starts in).
type rateLimiters struct {
	limit rate.Limit
	burst int

	mu sync.Mutex
	m  map[peer.ID]*rate.Limiter
}

const maxRequesters = 8192

func newRateLimiters(perSecond float64, burst int) *rateLimiters {
	if perSecond <= 0 {
		return &rateLimiters{limit: rate.Inf}
	}
	return &rateLimiters{limit: rate.Limit(perSecond), burst: burst, m: make(map[peer.ID]*rate.Limiter)}
}

// allow takes one token from p's bucket.
func (r *rateLimiters) allow(p peer.ID) bool {
	if r.limit == rate.Inf {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := r.m[p]
	if !ok {
		if len(r.m) >= maxRequesters {
			now := time.Now()
			for id, old := range r.m {
				if old.TokensAt(now) >= float64(r.burst) {
					delete(r.m, id)
				}
			}
		}
		l = rate.NewLimiter(r.limit, r.burst)
		r.m[p] = l
	}
	return l.Allow()
}
