package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/meshagent/meshagent/protocol"
)

// BeadContexts is what the bead context API (BeadContextHandler, and
// mesh.context* of Register) needs of a node: seed 004's shared bead
// contexts. *node.Node satisfies it.
type BeadContexts interface {
	ContextGet(ctx context.Context, beadID string) (*protocol.BeadContext, error)
	ContextSet(ctx context.Context, beadID string, doc json.RawMessage, members []string) (*protocol.BeadContext, error)
	ContextPatch(ctx context.Context, beadID string, patch json.RawMessage, members []string) (*protocol.BeadContext, error)
}

// BeadsPath begins seed 004's shared bead context paths,
// /api/v1/beads/{bead_id}/context.
const BeadsPath = "/api/v1/beads/"

// maxContextBody bounds a POST or PATCH body: a document or patch may be
// at most 64 KiB (beadctx.MaxDocBytes, MaxPatchBytes), and the JSON sent
// may carry whitespace that canonical form drops.
const maxContextBody = 256 << 10

// OwnsBeadContext reports whether path is served by BeadContextHandler.
func OwnsBeadContext(path string) bool { return strings.HasPrefix(path, BeadsPath) }

// BeadContextHandler serves seed 004's context access API over the node's
// shared bead contexts:
//
//	GET   /api/v1/beads/{bead_id}/context   the context
//	POST  /api/v1/beads/{bead_id}/context   replace the document with the body (a JSON object)
//	PATCH /api/v1/beads/{bead_id}/context   apply the body, an RFC 7396 merge patch (a JSON object)
//
// Only a bead's members change it: the first change makes this agent a
// member, and POST or PATCH with ?members=ID,ID... (the one query
// parameter they take, up to 64 agent ids) sets the members after the
// change; a change by an agent that is not a member is 403.
//
// Each answers 200 with the context as this node holds it after the
// change: {"bead_id","collaborating_agents","shared_context","version",
// "patches","refused","message_history"} (protocol.BeadContext). A body must be JSON
// (application/json, or application/merge-patch+json for PATCH; no
// Content-Type is taken as JSON), at most 256 KiB, one object without
// repeated members; other query parameters are refused. Errors are
// {"error": "..."}: 400 for a bad bead id, body or members, 403 when this
// agent is not a member, 413 past the size, 415 for another media type,
// 429 past the beads a node follows, 502 when the mesh failed.
func BeadContextHandler(c BeadContexts) http.Handler {
	mux := http.NewServeMux()
	path := BeadsPath + "{bead_id}/context"
	mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
		if len(r.URL.Query()) > 0 {
			writeError(w, http.StatusBadRequest, "a bead context takes no query parameters")
			return
		}
		res, err := c.ContextGet(r.Context(), r.PathValue("bead_id"))
		answerContext(w, res, err)
	})
	change := func(patch bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			members, err := contextMembers(r)
			if err != nil {
				writeError(w, http.StatusBadRequest, err.Error())
				return
			}
			body, code, err := contextBody(w, r, patch)
			if err != nil {
				writeError(w, code, err.Error())
				return
			}
			var res *protocol.BeadContext
			if patch {
				res, err = c.ContextPatch(r.Context(), r.PathValue("bead_id"), body, members)
			} else {
				res, err = c.ContextSet(r.Context(), r.PathValue("bead_id"), body, members)
			}
			answerContext(w, res, err)
		}
	}
	mux.HandleFunc("POST "+path, change(false))
	mux.HandleFunc("PATCH "+path, change(true))
	return mux
}

// maxContextMembers bounds the agent ids of ?members= (beadctx.MaxMembers).
const maxContextMembers = 64

// contextMembers reads the members query parameter of a POST or PATCH:
// nil when absent; agent ids separated by commas, in one or more
// parameters, otherwise. Any other parameter is refused.
func contextMembers(r *http.Request) ([]string, error) {
	q := r.URL.Query()
	for k := range q {
		if k != "members" {
			return nil, fmt.Errorf("unknown query parameter %q (a change takes only members)", k)
		}
	}
	vals, ok := q["members"]
	if !ok {
		return nil, nil
	}
	var out []string
	for _, v := range vals {
		for id := range strings.SplitSeq(v, ",") {
			if id = strings.TrimSpace(id); id == "" {
				return nil, errors.New("members: an empty agent id (send members=ID,ID...)")
			}
			if len(out) == maxContextMembers {
				return nil, fmt.Errorf("members: more than %d agent ids", maxContextMembers)
			}
			out = append(out, id)
		}
	}
	return out, nil
}

// contextBody reads a POST or PATCH body, checked as BeadContextHandler
// says; the node checks the JSON itself (duplicates, UTF-8, size).
func contextBody(w http.ResponseWriter, r *http.Request, patch bool) ([]byte, int, error) {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !(patch && mt == "application/merge-patch+json")) {
			want := "application/json"
			if patch {
				want += " or application/merge-patch+json"
			}
			return nil, http.StatusUnsupportedMediaType, fmt.Errorf("Content-Type %q: send %s", ct, want)
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxContextBody))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the body exceeds %d bytes", maxContextBody)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("reading the body: %w", err)
	}
	what := "the new context"
	if patch {
		what = "a merge patch"
	}
	trimmed := strings.TrimSpace(string(body))
	if trimmed == "" || trimmed[0] != '{' {
		return nil, http.StatusBadRequest, fmt.Errorf("the body must be %s: a JSON object", what)
	}
	return []byte(trimmed), 0, nil
}

func answerContext(w http.ResponseWriter, res *protocol.BeadContext, err error) {
	if err == nil {
		writeJSON(w, http.StatusOK, res)
		return
	}
	pe := protocol.AsError(err)
	code := http.StatusBadGateway
	switch pe.Code {
	case protocol.CodeInvalidMessage:
		code = http.StatusBadRequest
	case protocol.CodeRateLimited:
		code = http.StatusTooManyRequests
	case protocol.CodeUnauthorized:
		code = http.StatusForbidden
	}
	writeError(w, code, pe.Message)
}
