package lobby

import (
	"bufio"
	"net"
	"net/http"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/meshagent/meshagent/relay"
)

// Limits bound each connection and the lobby's number of clients (see
// relay.Limits; MaxBatch and MaxPendingCalls are unused here).
type Limits = relay.Limits

// DefaultLimits returns the limits a lobby uses unless told otherwise.
func DefaultLimits() Limits { return relay.DefaultLimits() }

// Errors of a connection's send queue.
var (
	errClosed       = relay.ErrClosed
	errSlowConsumer = relay.ErrSlowConsumer
)

// quickClose bounds the closing handshake with a client closed for
// holding a slot without establishing itself.
const quickClose = time.Second

// hijackRecorder keeps the raw connection the WebSocket library takes
// over, so that a closing handshake with a client that does not answer
// can be cut short.
type hijackRecorder struct {
	http.ResponseWriter
	conn net.Conn
}

func (h *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	h.conn = conn
	return conn, rw, err
}

func (h *hijackRecorder) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// originAllowed applies Config.OriginPatterns to a WebSocket request.
func originAllowed(patterns []string, r *http.Request) bool {
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
