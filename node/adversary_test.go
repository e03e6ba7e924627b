package node_test

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// rawStream opens a request stream from a's host to p, bypassing a's
// well-behaved client, so a test can write whatever bytes it likes.
func rawStream(t testing.TB, a, p *node.Node) network.Stream {
	t.Helper()
	s, err := a.Host().NewStream(meshtest.Context(t, 10*time.Second), p.ID(), protocol.RequestProtocol)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Reset() })
	_ = s.SetDeadline(time.Now().Add(10 * time.Second))
	return s
}

// readAnswer reads one frame from p and returns the *protocol.Error it
// carries, or nil for a success response.
func readAnswer(t *testing.T, s network.Stream, p peer.ID) (*protocol.Response, error) {
	t.Helper()
	frame, err := protocol.NewFrameReader(s, 0).Next()
	if err != nil {
		t.Fatalf("reading answer: %v", err)
	}
	sig, body, err := protocol.SplitSigned(frame)
	if err != nil {
		t.Fatal(err)
	}
	e, err := protocol.Open(body, sig, p)
	if err != nil {
		t.Fatalf("answer does not verify: %v", err)
	}
	return protocol.DecodeResponse(e)
}

func signer(t testing.TB, i int) *sign.Signer {
	t.Helper()
	s, err := sign.NewSigner(meshtest.Key(t, i))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type craft struct {
	signer   *sign.Signer // who signs; defaults to the sending node
	from     string       // overrides from.agentId after sealing preparation
	to       string
	age      time.Duration
	tamper   bool
	corrID   string
	envelope func(*protocol.Envelope)
}

func requestFrame(t *testing.T, s *sign.Signer, to peer.ID, c craft) []byte {
	t.Helper()
	if c.corrID == "" {
		c.corrID = protocol.NewID()
	}
	recipient := to.String()
	if c.to != "" {
		recipient = c.to
	}
	e, err := protocol.NewEnvelope(protocol.TypeRequest, &protocol.Recipient{AgentID: recipient},
		&protocol.Request{Action: "echo", CorrelationID: c.corrID, Params: json.RawMessage(`{"x":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	e.Timestamp = protocol.FormatTime(time.Now().Add(-c.age))
	if c.envelope != nil {
		c.envelope(e)
	}
	body, sig, err := protocol.Seal(s, e)
	if err != nil {
		t.Fatal(err)
	}
	if c.from != "" {
		// Claim another sender after signing: the bytes no longer match.
		e.From.AgentID = c.from
		body, err = protocol.MarshalCanonical(e)
		if err != nil {
			t.Fatal(err)
		}
	}
	if c.tamper {
		body = append([]byte(nil), body...)
		for i := range body {
			if body[i] == '1' { // the params value
				body[i] = '2'
				break
			}
		}
	}
	return protocol.AppendSignedFrame(nil, sig, body)
}

func TestAdversarialRequests(t *testing.T) {
	var handled atomic.Int32
	counting := node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
		handled.Add(1)
		return c.Request.Params, nil
	})
	p := meshtest.Node(t, 2, node.WithServices(node.Service{Capability: protocol.Capability{Name: "echo"}, Handler: counting}))
	a := meshtest.Node(t, 1)
	meshtest.Connect(t, a, p)
	self := signer(t, 1)

	tests := []struct {
		name     string
		frame    func() []byte
		wantCode protocol.Code
	}{
		{"signed by another key", func() []byte { return requestFrame(t, signer(t, 5), p.ID(), craft{}) }, protocol.CodeInvalidSignature},
		{"claims another sender", func() []byte { return requestFrame(t, self, p.ID(), craft{from: meshtest.ID(t, 5).String()}) }, protocol.CodeInvalidSignature},
		{"tampered payload", func() []byte { return requestFrame(t, self, p.ID(), craft{tamper: true}) }, protocol.CodeInvalidSignature},
		{"wrong recipient", func() []byte { return requestFrame(t, self, p.ID(), craft{to: meshtest.ID(t, 7).String()}) }, protocol.CodeUnknownAgent},
		{"stale timestamp", func() []byte { return requestFrame(t, self, p.ID(), craft{age: 10 * time.Minute}) }, protocol.CodeInvalidMessage},
		{"future timestamp", func() []byte { return requestFrame(t, self, p.ID(), craft{age: -10 * time.Minute}) }, protocol.CodeInvalidMessage},
		{"request without correlationId", func() []byte {
			return requestFrame(t, self, p.ID(), craft{envelope: func(e *protocol.Envelope) { e.Payload = json.RawMessage(`{"action":"echo"}`) }})
		}, protocol.CodeInvalidMessage},
		{"garbage body", func() []byte {
			return protocol.AppendFrame(nil, append(make([]byte, 64), []byte(`{"not":"an envelope"}`)...))
		}, protocol.CodeInvalidSignature},
		{"too short", func() []byte { return protocol.AppendFrame(nil, []byte("hi")) }, protocol.CodeInvalidMessage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := handled.Load()
			s := rawStream(t, a, p)
			if _, err := s.Write(tc.frame()); err != nil {
				t.Fatal(err)
			}
			_, err := readAnswer(t, s, p.ID())
			wantCode(t, err, tc.wantCode)
			if handled.Load() != before {
				t.Fatal("handler ran for a rejected request")
			}
		})
	}

	t.Run("replayed envelope", func(t *testing.T) {
		before := handled.Load()
		frame := requestFrame(t, self, p.ID(), craft{corrID: "replay-1"})
		s := rawStream(t, a, p)
		if _, err := s.Write(frame); err != nil {
			t.Fatal(err)
		}
		if resp, err := readAnswer(t, s, p.ID()); err != nil || resp.Status != protocol.StatusSuccess {
			t.Fatalf("first delivery: %v %v", resp, err)
		}
		s2 := rawStream(t, a, p)
		if _, err := s2.Write(frame); err != nil {
			t.Fatal(err)
		}
		_, err := readAnswer(t, s2, p.ID())
		pe := wantCode(t, err, protocol.CodeInvalidMessage)
		if pe.CorrelationID != "replay-1" {
			t.Errorf("error not correlated: %+v", pe)
		}
		if got := handled.Load() - before; got != 1 {
			t.Fatalf("handler ran %d times, want 1", got)
		}
	})

	t.Run("oversize frame", func(t *testing.T) {
		s := rawStream(t, a, p)
		// Announce 2 MiB and send nothing more: the provider must refuse on
		// the prefix alone, not wait for (or buffer) the body.
		if _, err := s.Write(binary.AppendUvarint(nil, 2<<20)); err != nil {
			t.Fatal(err)
		}
		_, err := readAnswer(t, s, p.ID())
		pe := wantCode(t, err, protocol.CodeInvalidMessage)
		if !strings.Contains(pe.Message, "frame too large") {
			t.Errorf("message %q", pe.Message)
		}
		// The stream is then reset; reading further fails.
		if _, err := protocol.NewFrameReader(s, 0).Next(); err == nil {
			t.Fatal("stream still open after oversize frame")
		}
	})

	t.Run("provider still serves honest callers", func(t *testing.T) {
		resp, err := call(t, a, p, "echo", `{"ok":true}`)
		if err != nil || string(resp.Result) != `{"ok":true}` {
			t.Fatalf("%v %v", resp, err)
		}
	})
}

// TestWrongTypedMembers sends validly signed requests whose payload members
// have the wrong JSON type. Each must be answered INVALID_MESSAGE naming the
// member (one such frame used to crash the provider), and the provider
// must keep serving.
func TestWrongTypedMembers(t *testing.T) {
	var handled atomic.Int32
	counting := node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
		handled.Add(1)
		return c.Request.Params, nil
	})
	p := meshtest.Node(t, 2, node.WithServices(node.Service{Capability: protocol.Capability{Name: "echo"}, Handler: counting}))
	a := meshtest.Node(t, 1)
	meshtest.Connect(t, a, p)
	self := signer(t, 1)

	tests := []struct {
		name, payload, wantInMessage string
	}{
		{"action a number", `{"action":5,"correlationId":"c1","params":{}}`, `"action" must be a string`},
		{"correlationId a number", `{"action":"echo","correlationId":7,"params":{}}`, `"correlationId" must be a string`},
		{"timeout a string", `{"action":"echo","correlationId":"c3","params":{},"timeout":"10000"}`, `"timeout" must be an integer`},
		{"timeout a fraction", `{"action":"echo","correlationId":"c4","params":{},"timeout":1.5}`, `"timeout" must be an integer`},
		{"timeout out of range", `{"action":"echo","correlationId":"c5","params":{},"timeout":1e300}`, `"timeout" must be an integer`},
		{"action an object", `{"action":{"x":1},"correlationId":"c6"}`, `"action" must be a string`},
		{"params an array", `{"action":"echo","correlationId":"c7","params":[1]}`, "params must be a JSON object"},
		{"params a string", `{"action":"echo","correlationId":"c8","params":"x"}`, "params must be a JSON object"},
		{"message_id a number", `{"action":"agent.message","correlationId":"c9","params":{"body":"b","message_id":5}}`, `"message_id" must be a string`},
		{"requires_response a string", `{"action":"agent.message","correlationId":"c10","params":{"body":"b","message_id":"m","requires_response":"yes"}}`, `"requires_response" must be a boolean`},
		{"task_id a number", `{"action":"task.status","correlationId":"c11","params":{"task_id":5}}`, `"task_id" must be a string`},
		{"task.cancel params an array", `{"action":"task.cancel","correlationId":"c12","params":[]}`, "params must be a JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := handled.Load()
			s := rawStream(t, a, p)
			frame := requestFrame(t, self, p.ID(), craft{envelope: func(e *protocol.Envelope) { e.Payload = json.RawMessage(tc.payload) }})
			if _, err := s.Write(frame); err != nil {
				t.Fatal(err)
			}
			_, err := readAnswer(t, s, p.ID())
			pe := wantCode(t, err, protocol.CodeInvalidMessage)
			if !strings.Contains(pe.Message, tc.wantInMessage) {
				t.Errorf("message %q does not say %q", pe.Message, tc.wantInMessage)
			}
			if handled.Load() != before {
				t.Fatal("handler ran for a rejected request")
			}
			resp, err := call(t, a, p, "echo", `{"ok":true}`)
			if err != nil || string(resp.Result) != `{"ok":true}` {
				t.Fatalf("honest call after the bad frame: %v %v", resp, err)
			}
		})
	}
}
