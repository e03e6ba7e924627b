package lobby

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/meshagent/meshagent/protocol"
)

// Mesh is what the lobby needs of the node it runs on: its own agent id
// (left out of discovery answers) and signed calls to mesh agents.
// *node.Node satisfies it; the compile-time check lives with the caller,
// so that lobby never imports node. Implementations must be safe for
// concurrent use, and Call must return when ctx ends.
type Mesh interface {
	AgentID() string
	Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error)
}

// ClientPrefix starts the name by which the relay vouches for a lobby
// agent when it calls a mesh agent for it (protocol.MetaOnBehalfOf):
// lobby agent alice is "lobby:alice", which a provider's
// authorized_requester_ids and policy name "<relay id>/lobby:alice" (or
// "<relay id>/lobby:*" for every lobby agent of that relay).
const ClientPrefix = "lobby:"

// callMesh calls a mesh agent for lobby agent client, vouching for it.
// answer receives each RESPONSE payload (in_progress ones, then the final
// one); fail receives a failure of the lobby's own.
func (l *Lobby) callMesh(ctx context.Context, client, to, name string, members []member, answer func(json.RawMessage), fail func(*protocol.Error)) {
	var mu sync.Mutex
	done := false
	defer func() {
		mu.Lock()
		done = true
		mu.Unlock()
		if p := recover(); p != nil {
			l.log.Error("mesh call panicked", "to", to, "capability", name, "panic", p)
			fail(protocol.Errorf(protocol.CodeInternalError, "internal error"))
		}
	}()
	req := protocol.CallRequest{
		To:         to,
		Action:     name,
		Params:     buildObject(nil, members, "capability_name"),
		Timeout:    l.cfg.RequestTimeout,
		OnBehalfOf: ClientPrefix + client,
		Progress: func(r *protocol.Response) {
			mu.Lock()
			defer mu.Unlock()
			if done || r == nil {
				return
			}
			answer(statusPayload(protocol.StatusInProgress, r.Result))
		},
	}
	resp, err := l.mesh.Call(ctx, req)
	mu.Lock()
	done = true
	mu.Unlock()
	switch {
	case err != nil:
		answer(errorPayload(protocol.AsError(err)))
	case resp == nil:
		fail(protocol.Errorf(protocol.CodeInternalError, "the mesh returned no response"))
	default:
		status := resp.Status
		if status == "" || status == protocol.StatusInProgress {
			status = protocol.StatusSuccess
		}
		answer(statusPayload(status, resp.Result))
	}
}

// statusPayload builds a RESPONSE payload from a mesh result: an object's
// members follow "status"; any other value goes under "result".
func statusPayload(status protocol.Status, result json.RawMessage) json.RawMessage {
	first := []member{{name: "status", raw: json.RawMessage(strconvQuote(string(status)))}}
	r := trimJSONSpace(result)
	if len(r) == 0 || isNull(r) {
		return buildObject(first, nil)
	}
	if r[0] == '{' {
		if members, err := objectMembers(r); err == nil {
			return buildObject(first, members, "status")
		}
	}
	return buildObject(append(first, member{name: "result", raw: r}), nil)
}
