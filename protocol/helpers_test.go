package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/sign"
)

// Fixed values for deterministic envelopes.
const (
	testID        = "550e8400-e29b-41d4-a716-446655440000"
	testTimestamp = "2026-02-01T15:08:00.000Z"
)

// testSigner returns the signer whose Ed25519 seed is 32 bytes of b
// (seed 0x01 signs the golden envelopes, 0x02 is the usual recipient).
func testSigner(tb testing.TB, b byte) *sign.Signer {
	tb.Helper()
	k, err := sign.KeyFromSeed(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		tb.Fatal(err)
	}
	s, err := sign.NewSigner(k)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// testEnvelope returns an unsigned envelope with a fixed id and timestamp.
func testEnvelope(tb testing.TB, typ MessageType, to *Recipient, payload any) *Envelope {
	tb.Helper()
	e, err := NewEnvelope(typ, to, payload)
	if err != nil {
		tb.Fatal(err)
	}
	e.ID = testID
	e.Timestamp = testTimestamp
	return e
}

// testRequest returns a request envelope from nobody yet to the agent of
// seed 0x02.
func testRequest(tb testing.TB) *Envelope {
	tb.Helper()
	return testEnvelope(tb, TypeRequest, &Recipient{AgentID: testSigner(tb, 2).ID().String()}, Request{
		Action:        "code-review",
		CorrelationID: "req-123",
		Params:        json.RawMessage(`{"code":"function add(a, b) { return a + b; }","language":"javascript"}`),
		Timeout:       30000,
	})
}

// seal seals e as s and fails the test on error.
func seal(tb testing.TB, s *sign.Signer, e *Envelope) (body, sig []byte) {
	tb.Helper()
	body, sig, err := Seal(s, e)
	if err != nil {
		tb.Fatalf("Seal: %v", err)
	}
	return body, sig
}

// wantCode fails unless err is an *Error with the given code.
func wantCode(tb testing.TB, err error, code Code) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("got no error, want %s", code)
	}
	var pe *Error
	if !errors.As(err, &pe) {
		tb.Fatalf("got %T %v, want an *Error with code %s", err, err, code)
	}
	if pe.Code != code {
		tb.Fatalf("got code %s (%v), want %s", pe.Code, err, code)
	}
}

// mustID parses an agent id.
func mustID(tb testing.TB, s string) peer.ID {
	tb.Helper()
	id, err := sign.ParseAgentID(s)
	if err != nil {
		tb.Fatal(err)
	}
	return id
}
