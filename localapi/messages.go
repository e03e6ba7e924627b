package localapi

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
)

// AuditLog is what GET /api/v1/messages needs of a node: its audit log.
// *node.Node satisfies it.
type AuditLog interface {
	Audit(ctx context.Context, q protocol.AuditQuery) ([]protocol.AuditEntry, error)
}

// MessagesPath is where the audit log is served (seed 004's "all
// inter-agent communication logged").
const MessagesPath = "/api/v1/messages"

// MessageList is the answer of GET /api/v1/messages: the entries, newest
// first, and, when the page is full, Next: the before= of the next page.
type MessageList struct {
	Messages []protocol.AuditEntry `json:"messages"`
	Count    int                   `json:"count"`
	Next     string                `json:"next,omitempty"`
}

// OwnsMessages reports whether path is served by MessagesHandler.
func OwnsMessages(path string) bool { return path == MessagesPath }

// MessagesHandler serves GET /api/v1/messages over log: the requests and
// messages this node sent and served, newest first, filtered by the query
// parameters agent (requester or provider, a peer id or seed 002's base64
// key), since and until (RFC 3339), limit (1 to 1000, default 100) and
// before (the next of the previous page). Any other parameter is a 400. A
// node that keeps no audit log answers 404 saying how to start one.
func MessagesHandler(log AuditLog) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "GET only")
			return
		}
		q, err := parseAuditQuery(r)
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		es, err := log.Audit(r.Context(), q)
		if err != nil {
			if protocol.CodeOf(err) == protocol.CodeCapabilityNotSupported {
				writeError(w, http.StatusNotFound, protocol.AsError(err).Message)
				return
			}
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		list := MessageList{Messages: es, Count: len(es)}
		if list.Messages == nil {
			list.Messages = []protocol.AuditEntry{}
		}
		if len(es) == q.Limit {
			list.Next = es[len(es)-1].ID
		}
		writeJSON(w, http.StatusOK, list)
	})
}

func parseAuditQuery(r *http.Request) (protocol.AuditQuery, error) {
	var q protocol.AuditQuery
	for name, vs := range r.URL.Query() {
		if len(vs) != 1 || vs[0] == "" {
			return q, fmt.Errorf("%s must be given once and not be empty", name)
		}
		v := vs[0]
		var err error
		switch name {
		case "agent":
			id, perr := sign.ParseAgentID(v)
			if perr != nil {
				return q, fmt.Errorf("agent %q is not an agent id (a peer id 12D3KooW… or a base64 Ed25519 public key)", v)
			}
			q.Agent = id.String()
		case "since":
			q.Since, err = time.Parse(time.RFC3339Nano, v)
		case "until":
			q.Until, err = time.Parse(time.RFC3339Nano, v)
		case "limit":
			q.Limit, err = strconv.Atoi(v)
			if err == nil && q.Limit < 1 {
				err = fmt.Errorf("%d is not positive", q.Limit)
			}
		case "before":
			q.Before = v
		default:
			return q, fmt.Errorf("unknown query parameter %q (agent, since, until, limit, before)", name)
		}
		if err != nil {
			return q, fmt.Errorf("%s: %v", name, err)
		}
	}
	if err := rpc.CheckAuditQuery(&q); err != nil {
		return q, err
	}
	return q, nil
}
