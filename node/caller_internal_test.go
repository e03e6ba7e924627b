package node

import (
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
)

// A frame's correlation id hint only picks who verifies it: an envelope
// whose metadata names one call while its verified payload answers another
// reaches the call its payload names, and only that one.
func TestRouteByHintDeliversByVerifiedID(t *testing.T) {
	e, err := protocol.NewEnvelope(protocol.TypeResponse, &protocol.Recipient{AgentID: "x"},
		&protocol.Response{CorrelationID: "b", Status: protocol.StatusInProgress, Result: json.RawMessage(`{"step":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	e.Metadata = json.RawMessage(`{"correlationId":"a"}`)
	frame, err := protocol.MarshalCanonical(e)
	if err != nil {
		t.Fatal(err)
	}
	cl := &caller{log: slog.New(slog.DiscardHandler),
		open: func([]byte, peer.ID, bool) (*protocol.Envelope, error) { return e, nil }} // stands for verification
	c := &reqConn{cl: cl, pending: map[string]*pendingCall{}}
	got := map[string]int{}
	for _, id := range []string{"a", "b"} {
		c.pending[id] = &pendingCall{progress: func(*protocol.Response) { got[id]++ },
			frames: make(chan []byte, routedFrames), gone: make(chan struct{}), final: make(chan callResult, 1)}
	}
	pc := c.route(frame)
	if pc != c.pending["a"] {
		t.Fatal("the hint did not route the frame to the call its metadata names")
	}
	if _, done := c.accept(frame, "a", pc); done {
		t.Fatal("call a took another call's answer")
	}
	if got["a"] != 0 || got["b"] != 1 {
		t.Fatalf("progress delivered %v, want only b's", got)
	}
}
