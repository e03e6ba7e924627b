package node

import (
	"context"
	"errors"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
)

// MaxAnyAttempts is how many providers CallAny tries at most for one
// request: enough to get past a provider that died or refused, few enough
// that a request nobody can serve fails fast.
const MaxAnyAttempts = 3

// candidate is one provider CallAny may choose, with what this node knows
// of its load and distance.
type candidate struct {
	id  peer.ID
	cap protocol.Capability // as the provider signed it
	// down: opening a stream to it failed recently; tried last.
	down bool
	// busy: its last heartbeat said busy (seed 004's agent_busy, or all
	// its handlers taken).
	busy bool
	// load is the share of its handlers in use (0…1): its heartbeat's,
	// or this node's own calls in flight to it if that says more, since
	// heartbeats lag behind.
	load float64
	// latency is the measured round trip (hello, ping); 0 when unknown.
	latency time.Duration
}

// Two latencies closer than this (absolute, or relative to the larger)
// count as equal: on one network the difference is noise (a single hello
// on a fresh connection can take several times the usual round trip),
// and preferring it would leave the "slowest" provider idle.
const (
	latencySlack    = 10 * time.Millisecond
	latencySlackPct = 50
)

// Two loads closer than this count as equal. A load comes from a
// heartbeat, a snapshot up to an interval old (minutes in a large mesh):
// one that caught a call or two in flight (0.001 each with 1,024
// handlers) must not make an idle provider lose every draw until its next
// heartbeat.
const loadSlack = 0.05

// better reports whether a should be tried before b: reachable first,
// then not busy, then less loaded (beyond loadSlack), then nearer. Ties
// go to a.
func better(a, b candidate) bool {
	if a.down != b.down {
		return !a.down
	}
	if a.busy != b.busy {
		return !a.busy
	}
	if d := a.load - b.load; d > loadSlack || d < -loadSlack {
		return d < 0
	}
	if a.latency == 0 || b.latency == 0 {
		return true // unknown: no preference
	}
	slack := max(latencySlack, max(a.latency, b.latency)*latencySlackPct/100)
	return a.latency-b.latency <= slack
}

// chooseProviders orders up to n of cands for trying, by the power of
// two choices: draw two at random, take the better, repeat with the
// rest. Callers that share stale heartbeats thus still spread their calls
// rather than all picking the one that looked least loaded, while a
// loaded or distant provider is seldom first. intn(k) returns a random
// number in [0, k).
func chooseProviders(cands []candidate, n int, intn func(int) int) []candidate {
	rest := append([]candidate(nil), cands...)
	out := make([]candidate, 0, min(n, len(rest)))
	for len(out) < n && len(rest) > 0 {
		i := intn(len(rest))
		if len(rest) > 1 {
			j := intn(len(rest) - 1)
			if j >= i {
				j++
			}
			if !better(rest[i], rest[j]) {
				i = j
			}
		}
		out = append(out, rest[i])
		rest = append(rest[:i], rest[i+1:]...)
	}
	return out
}

// mayFailOver reports whether a request that failed at one provider may
// be sent to the next. Only when it provably did not start, unless the
// capability is idempotent:
//
//   - not sent (no stream to the provider, or the write failed, so no
//     whole request reached it): UNKNOWN_AGENT and TIMEOUT of the opening
//     fail over; INVALID_MESSAGE (too large, not signable) would fail
//     everywhere and is final.
//   - answered CAPABILITY_NOT_SUPPORTED (it no longer serves the
//     capability: our directory was stale) or RATE_LIMITED (refused at
//     admission, or by a handler saying it did not do the work): fail
//     over.
//   - answered UNAUTHORIZED: final. Providers of one capability share its
//     ACL as a rule, and a caller must not go shopping for one that lets
//     it in; candidates whose signed ACL excludes the caller are not tried
//     at all.
//   - answered INVALID_MESSAGE, INVALID_SIGNATURE, INTERNAL_ERROR,
//     TIMEOUT, UNKNOWN_AGENT: final; the request was read, and in most
//     cases its handler ran.
//   - sent, then the stream failed before an answer (UNKNOWN_AGENT:
//     connection lost): the handler may have run. Fails over only when
//     the provider's capability object says "idempotent": true; else the
//     caller gets the error and the request runs at most once. This
//     includes a request written just before this node noticed that the
//     connection had gone: without an acknowledgement on the wire it
//     cannot be told from one the provider read.
//   - the deadline passed, the caller cancelled or the node closed: final.
func mayFailOver(stage callStage, err error, idempotent bool) bool {
	if errors.Is(err, ErrClosed) || errors.Is(err, context.Canceled) {
		return false
	}
	code := protocol.CodeOf(err)
	switch stage {
	case stageNotSent:
		return code == protocol.CodeUnknownAgent || code == protocol.CodeTimeout
	case stageAnswered:
		return code == protocol.CodeCapabilityNotSupported || code == protocol.CodeRateLimited
	case stageSent:
		return idempotent && code == protocol.CodeUnknownAgent
	}
	return false
}
