package node

import (
	"encoding/json"
	"log/slog"
	"strings"
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
		open: func([]byte, peer.ID) (*protocol.Envelope, error) { return e, nil }} // stands for verification
	c := &reqConn{cl: cl, pending: map[string]*pendingCall{}}
	got := map[string]int{}
	for _, id := range []string{"a", "b"} {
		c.pending[id] = &pendingCall{progress: func(*protocol.Response) { got[id]++ },
			frames: make(chan []byte, routedFrames), gone: make(chan struct{}), final: make(chan struct{}, 1)}
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

// TestCorrelationHint checks the hint against what encoding/json makes of
// the quoted id, which it read before plain ids skipped the decoder, and
// that route finds a pending call by a plain or an escaped id.
func TestCorrelationHint(t *testing.T) {
	for _, tc := range []struct {
		name, frame, want string
	}{
		{"plain", `{"correlationId":"req-123","status":"success"}`, "req-123"},
		{"uuid", `{"correlationId":"0b5a4c1e-9f0e-4c53-8d1b-6a1f0e2d3c4b"}`, "0b5a4c1e-9f0e-4c53-8d1b-6a1f0e2d3c4b"},
		{"escaped", `{"correlationId":"a\u0062c"}`, "abc"},
		{"escaped backslash", `{"correlationId":"a\\"}`, `a\`},
		{"escaped quote", `{"correlationId":"a\"b"}`, ""},
		{"non-ASCII", `{"correlationId":"é"}`, "é"},
		{"invalid UTF-8", "{\"correlationId\":\"a\xffb\"}", "a\ufffdb"},
		{"control", "{\"correlationId\":\"a\tb\"}", ""},
		{"empty", `{"correlationId":""}`, ""},
		{"missing", `{"status":"success"}`, ""},
		{"unterminated", `{"correlationId":"abc`, ""},
		{"too long", `{"correlationId":"` + strings.Repeat("x", protocol.MaxIDLen+1) + `"}`, ""},
		{"longest", `{"correlationId":"` + strings.Repeat("x", protocol.MaxIDLen) + `"}`, strings.Repeat("x", protocol.MaxIDLen)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := correlationHint([]byte(tc.frame)); got != tc.want {
				t.Errorf("correlationHint = %q, want %q", got, tc.want)
			}
			pc := &pendingCall{}
			c := &reqConn{pending: map[string]*pendingCall{tc.want: pc, "other": {}}}
			got := c.route([]byte(tc.frame))
			if want := map[bool]*pendingCall{true: pc, false: nil}[tc.want != ""]; got != want {
				t.Errorf("route found %p, want %p", got, want)
			}
		})
	}
}

// TestPutFrameSizes checks the buffer putFrame keeps for the next frame:
// the one given while the frame fitted in it, else one with room for a
// frame a quarter larger, but never one past maxPooledFrame.
func TestPutFrameSizes(t *testing.T) {
	for _, tc := range []struct {
		name             string
		bufCap, frameCap int
		want             int
	}{
		{"first frame", 0, 1000, 1250},
		{"frame fitted", 4096, 4088, 4096},
		{"frame outgrew", 1250, 2000, 2500},
		{"frame too large to keep room for", 1250, maxPooledFrame, 1250},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, 0, tc.bufCap)
			buf := &b
			putFrame(buf, make([]byte, tc.frameCap))
			if cap(*buf) != tc.want {
				t.Errorf("kept a buffer of %d bytes, want %d", cap(*buf), tc.want)
			}
		})
	}
}
