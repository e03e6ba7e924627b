package fakemesh

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/meshagent/meshagent/protocol"
)

// Agent ids of fixed Ed25519 keys (seeds sha256("relay-test-self") and
// sha256("relay-test-peer")), so transcripts can name them: SelfID is
// the mesh's own agent, PeerID (PeerB64 in seed 002's form) the one peer
// it knows.
const (
	SelfID  = "12D3KooWNmhA9NDeN7QxmnSy3XCuggwjKdFUFur6oAez2Kaioh4a"
	PeerID  = "12D3KooWARQ5NFim5LHmaZbpLJXX4ksRtnaZsmP6MLDvP7hZfGEC"
	PeerB64 = "CPl8IjggeetZYMd2LRvag5k3EDy6Ijt4SimGTZeB4ok="
)

// Mesh answers calls without any network; a successful answer hands a
// receipt signed by PeerID (PeerReceipt) to req.Signed. The capability
// decides:
//
//	echo      success; result {"to","action","params","timeoutMs"} as received
//	steps     params {"n": k}: k in_progress responses {"step": i}, then success {"done": true}
//	fail      params {"code","message","details"?,"correlationId"?}: that *protocol.Error
//	plain     a plain error ("disk on fire")
//	deadline  context.DeadlineExceeded
//	whoami    success; result {"onBehalfOf"} as the request vouched
//	nil       a nil response and no error
//	panic     panics
//	block     signals Entered, then waits for Release or ctx (signalling Cancelled)
//	other     CAPABILITY_NOT_SUPPORTED with details
type Mesh struct {
	// Entered receives a value each time a "block" call starts; Release,
	// closed or sent to, lets blocked calls succeed; Cancelled receives a
	// value for each blocked call whose ctx ended first. Entered and
	// Cancelled hold 64 values.
	Entered, Release, Cancelled chan struct{}
	// Calls counts the calls made.
	Calls atomic.Int64
}

// New returns a Mesh ready for calls.
func New() *Mesh {
	return &Mesh{Entered: make(chan struct{}, 64), Release: make(chan struct{}), Cancelled: make(chan struct{}, 64)}
}

// AgentID returns SelfID.
func (*Mesh) AgentID() string { return SelfID }

// Peers returns the one peer, PeerID, connected and offering echo.
func (*Mesh) Peers() []protocol.PeerInfo {
	return []protocol.PeerInfo{{
		AgentID:      PeerID,
		Name:         "peer",
		Capabilities: []protocol.Capability{{Name: "echo", Description: "echoes <params> & more"}},
		Addrs:        []string{"/ip4/127.0.0.1/tcp/4001"},
		Connected:    true,
	}}
}

// Call answers req as the type documentation says.
func (f *Mesh) Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error) {
	f.Calls.Add(1)
	ok := func(result string) (*protocol.Response, error) {
		resp := &protocol.Response{CorrelationID: "corr-1", Status: protocol.StatusSuccess, Result: json.RawMessage(result)}
		if req.Signed != nil {
			req.Signed(PeerReceipt(resp))
		}
		return resp, nil
	}
	switch req.Action {
	case "echo":
		var buf strings.Builder
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(map[string]any{"to": req.To, "action": req.Action, "params": req.Params, "timeoutMs": req.Timeout.Milliseconds()}); err != nil {
			return nil, err
		}
		return ok(buf.String())
	case "steps":
		var p struct{ N int }
		_ = json.Unmarshal(req.Params, &p)
		for i := 1; i <= p.N; i++ {
			req.Progress(&protocol.Response{CorrelationID: "corr-1", Status: protocol.StatusInProgress, Result: json.RawMessage(fmt.Sprintf(`{"step":%d}`, i))})
		}
		return ok(`{"done":true}`)
	case "fail":
		var pe protocol.Error
		if err := json.Unmarshal(req.Params, &pe); err != nil {
			return nil, err
		}
		return nil, &pe
	case "plain":
		return nil, errors.New("disk on fire")
	case "deadline":
		return nil, fmt.Errorf("waiting for peer: %w", context.DeadlineExceeded)
	case "whoami":
		b, err := json.Marshal(map[string]string{"onBehalfOf": req.OnBehalfOf})
		if err != nil {
			return nil, err
		}
		return ok(string(b))
	case "nil":
		return nil, nil
	case "panic":
		panic("fake mesh panicked")
	case "block":
		f.Entered <- struct{}{}
		select {
		case <-f.Release:
			return ok(`"released"`)
		case <-ctx.Done():
			f.Cancelled <- struct{}{}
			return nil, ctx.Err()
		}
	default:
		return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "agent does not offer %s", req.Action).
			WithDetails(map[string]any{"requested": req.Action, "available": []string{"echo", "steps"}})
	}
}
