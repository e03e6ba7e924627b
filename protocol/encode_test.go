package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/sign"
)

// generalMarshal is MarshalCanonical without the fast path.
func generalMarshal(t testing.TB, v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	out, err := MarshalCanonical(json.RawMessage(bytes.TrimSpace(buf.Bytes())))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestFastMarshalMatchesGeneral(t *testing.T) {
	tricky := "quote\" back\\ nl\n tab\t ctl\x01 del\x7f <>& é 👋 \u2028"
	values := []any{
		&Request{Action: "echo", CorrelationID: "c-1"},
		&Request{Action: tricky, CorrelationID: tricky, Params: json.RawMessage(`{"a":[1,2.5,"x"],"b":null}`), Timeout: 30000},
		&Request{Action: "a", CorrelationID: "b", Timeout: -5},
		&Response{CorrelationID: "c", Status: StatusSuccess},
		&Response{CorrelationID: tricky, Status: StatusInProgress, Result: json.RawMessage(`{"step":1}`)},
		&Envelope{From: Sender{AgentID: "A"}, ID: "i", Payload: json.RawMessage(`{}`), Protocol: Version, Timestamp: "t", Type: TypeNotify},
		&Envelope{From: Sender{AgentID: "A", Capabilities: []string{"x", tricky}, Name: tricky}, ID: tricky,
			Metadata: json.RawMessage(`{"priority":"high"}`), Payload: json.RawMessage(`{"k":"v"}`), Protocol: Version,
			Timestamp: "2026-01-01T00:00:00.000Z", To: &Recipient{AgentID: "B"}, Type: TypeRequest},
		&Envelope{From: Sender{AgentID: "A"}, ID: "i", Payload: json.RawMessage(`{}`), Protocol: Version, Timestamp: "t",
			To: &Recipient{Broadcast: true, Topic: "outbound:42"}, Type: TypeNotify, Signature: "sig"},
		&Envelope{From: Sender{AgentID: "A", Capabilities: []string{}}, ID: "i", Payload: json.RawMessage(`{}`), Protocol: Version, Timestamp: "t",
			To: &Recipient{}, Type: TypeHello},
	}
	for i, v := range values {
		fast, ok := fastMarshal(v)
		if !ok {
			t.Fatalf("value %d: fast path refused", i)
		}
		if want := generalMarshal(t, v); !bytes.Equal(fast, want) {
			t.Errorf("value %d:\n fast    %s\n general %s", i, fast, want)
		}
	}
	// Non-canonical raw members and invalid UTF-8 fall back.
	for i, v := range []any{
		&Request{Action: "a", CorrelationID: "b", Params: json.RawMessage(`{ "a": 1 }`)},
		&Response{CorrelationID: "\xff", Status: StatusSuccess},
		&Envelope{From: Sender{AgentID: "A"}, ID: "i", Payload: json.RawMessage(`{"b":1,"a":2}`), Protocol: Version, Timestamp: "t", Type: TypeNotify},
	} {
		if _, ok := fastMarshal(v); ok {
			t.Errorf("fallback value %d took the fast path", i)
		}
	}
}

func FuzzFastMarshal(f *testing.F) {
	fuzzSigner := testSigner(f, 1)
	f.Add("echo", "c-1", `{"a":1}`, "A", "n", int64(5))
	f.Add("\"\\\n", "\x01", `{}`, "é", "👋", int64(0))
	f.Fuzz(func(t *testing.T, action, corr, params, agent, name string, timeout int64) {
		req := &Request{Action: action, CorrelationID: corr, Params: json.RawMessage(params), Timeout: timeout}
		if fast, ok := fastMarshal(req); ok {
			if want := generalMarshal(t, req); !bytes.Equal(fast, want) {
				t.Fatalf("request:\n fast    %s\n general %s", fast, want)
			}
		}
		e := &Envelope{From: Sender{AgentID: agent, Name: name, Capabilities: []string{action}}, ID: corr,
			Payload: json.RawMessage(`{}`), Protocol: Version, Timestamp: name, To: &Recipient{AgentID: agent}, Type: TypeRequest}
		if fast, ok := fastMarshal(e); ok {
			if want := generalMarshal(t, e); !bytes.Equal(fast, want) {
				t.Fatalf("envelope:\n fast    %s\n general %s", fast, want)
			}
		}
		e.Payload, e.Timestamp = nil, "2026-01-01T00:00:00.000Z"
		checkSealPayloadFrame(t, fuzzSigner, e, req)
		checkSealPayloadFrame(t, fuzzSigner, e, &Response{CorrelationID: corr, Status: Status(name), Result: req.Params})
	})
}

func TestSealFrameMatchesSeal(t *testing.T) {
	s := testSigner(t, 1)
	for _, e := range []*Envelope{
		{ID: "i", Payload: json.RawMessage(`{"a":1}`), Protocol: Version, Timestamp: "2026-01-01T00:00:00.000Z", To: &Recipient{AgentID: "B"}, Type: TypeRequest},
		{ID: "j", Payload: json.RawMessage(`{"b":"\u00e9"}`), Protocol: Version, Timestamp: "2026-01-01T00:00:00.000Z", To: &Recipient{Broadcast: true, Topic: "t:1"}, Type: TypeNotify},
		{ID: "k", Payload: json.RawMessage(`{ "b": 1 }`), Protocol: Version, Timestamp: "2026-01-01T00:00:00.000Z", To: &Recipient{AgentID: "B"}, Type: TypeRequest}, // general path
	} {
		e2 := *e
		frame, err := SealFrame(s, e)
		if err != nil {
			t.Fatal(err)
		}
		body, sig, err := Seal(s, &e2)
		if err != nil {
			t.Fatal(err)
		}
		if want := AppendSignedFrame(nil, sig, body); !bytes.Equal(frame, want) {
			t.Errorf("SealFrame %q\nwant      %q", frame, want)
		}
	}
}

// sealPayloadReference is what SealPayloadFrame must return: the payload
// encoded on its own, then the envelope sealed as a frame.
func sealPayloadReference(s *sign.Signer, e *Envelope, payload any) ([]byte, error) {
	p, err := MarshalCanonical(payload)
	if err != nil {
		return nil, Errorf(CodeInvalidMessage, "protocol: payload: %v", err)
	}
	e.Payload = p
	return SealFrame(s, e)
}

// checkSealPayloadFrame compares SealPayloadFrame with its reference on
// copies of e.
func checkSealPayloadFrame(t *testing.T, s *sign.Signer, e *Envelope, payload any) {
	t.Helper()
	e1, e2 := testEnvelopeCopy(t, e), testEnvelopeCopy(t, e)
	got, gerr := SealPayloadFrame(s, e1, payload)
	want, werr := sealPayloadReference(s, e2, payload)
	if (gerr == nil) != (werr == nil) || gerr != nil && (gerr.Error() != werr.Error() || CodeOf(gerr) != CodeOf(werr)) {
		t.Fatalf("SealPayloadFrame error %v, reference %v", gerr, werr)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("SealPayloadFrame %q\nreference        %q", got, want)
	}
	if werr == nil && !bytes.Equal(e1.Payload, e2.Payload) {
		t.Fatalf("SealPayloadFrame left payload %s, reference %s", e1.Payload, e2.Payload)
	}
	// Into a buffer used before, with room and without: the same frame.
	for _, size := range []int{16, 64 << 10} {
		buf := bytes.Repeat([]byte{0xff}, size)
		e3 := testEnvelopeCopy(t, e)
		got, gerr := SealPayloadFrameInto(buf[:size/2], s, e3, payload)
		if (gerr == nil) != (werr == nil) || gerr != nil && gerr.Error() != werr.Error() {
			t.Fatalf("SealPayloadFrameInto(%d bytes) error %v, reference %v", size, gerr, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("SealPayloadFrameInto(%d bytes) %q\nreference                     %q", size, got, want)
		}
		if werr == nil && !bytes.Equal(e3.Payload, e2.Payload) {
			t.Fatalf("SealPayloadFrameInto(%d bytes) left payload %s, reference %s", size, e3.Payload, e2.Payload)
		}
	}
}

// TestSealPayloadFrameIntoReuses checks that a frame is built in the
// buffer given when it has room, so that a sender can reuse its memory.
func TestSealPayloadFrameIntoReuses(t *testing.T) {
	s := testSigner(t, 1)
	buf := make([]byte, 0, 4096)
	for i := range 3 {
		e := &Envelope{ID: "i", Protocol: Version, Timestamp: "2026-01-01T00:00:00.000Z", To: &Recipient{AgentID: "B"}, Type: TypeResponse}
		frame, err := SealPayloadFrameInto(buf, s, e, &Response{CorrelationID: fmt.Sprint(i), Status: StatusSuccess, Result: json.RawMessage(`{"n":1}`)})
		if err != nil {
			t.Fatal(err)
		}
		if end := &frame[:cap(frame)][cap(frame)-1]; end != &buf[:cap(buf)][cap(buf)-1] {
			t.Fatalf("frame %d was not built in the buffer given", i)
		}
	}
}

func TestSealPayloadFrameMatchesSealFrame(t *testing.T) {
	s := testSigner(t, 1)
	tricky := "quote\" back\\ nl\n tab\t ctl\x01 é 👋 \u2028"
	header := func(edit func(*Envelope)) *Envelope {
		e := &Envelope{ID: "i", Protocol: Version, Timestamp: "2026-01-01T00:00:00.000Z", To: &Recipient{AgentID: "B"}, Type: TypeRequest,
			From: Sender{Name: "n", Capabilities: []string{"echo", tricky}}}
		if edit != nil {
			edit(e)
		}
		return e
	}
	big := json.RawMessage(`{"text":"` + strings.Repeat("a", 5000) + `"}`)
	for _, tc := range []struct {
		name    string
		e       *Envelope
		payload any
	}{
		{"request", header(nil), &Request{Action: "echo", CorrelationID: "c-1", Params: json.RawMessage(`{"a":[1,2.5,"x"]}`), Timeout: 30000}},
		{"request without params", header(nil), &Request{Action: tricky, CorrelationID: tricky}},
		{"request larger than the estimate", header(nil), &Request{Action: "echo", CorrelationID: strings.Repeat("c", 100), Params: big}},
		{"request with metadata", header(func(e *Envelope) { e.Metadata = json.RawMessage(`{"onBehalfOf":"x"}`) }),
			&Request{Action: "echo", CorrelationID: "c"}},
		{"request, params not canonical", header(nil), &Request{Action: "echo", CorrelationID: "c", Params: json.RawMessage(`{ "b": 1, "a": 2 }`)}},
		{"request, action not UTF-8", header(nil), &Request{Action: "\xff", CorrelationID: "c"}},
		{"request, timeout beyond a double", header(nil), &Request{Action: "a", CorrelationID: "c", Timeout: maxExactInt}},
		{"response", header(func(e *Envelope) { e.Type = TypeResponse; e.From = Sender{} }),
			&Response{CorrelationID: "c", Status: StatusSuccess, Result: big}},
		{"response without result", header(func(e *Envelope) { e.Type = TypeResponse }), &Response{CorrelationID: "c", Status: StatusInProgress}},
		{"error payload", header(func(e *Envelope) { e.Type = TypeError }), &Error{Code: CodeTimeout, Message: "m", CorrelationID: "c"}},
		{"map payload", header(func(e *Envelope) { e.Type = TypeNotify; e.To = &Recipient{Broadcast: true, Topic: "t"} }), map[string]any{"b": 1, "a": "x"}},
		{"payload not an object", header(nil), []int{1}},
		{"payload not JSON", header(nil), make(chan int)},
		{"name not UTF-8", header(func(e *Envelope) { e.From.Name = "\xff" }), &Request{Action: "echo", CorrelationID: "c"}},
		{"invalid envelope", header(func(e *Envelope) { e.ID = "" }), &Request{Action: "echo", CorrelationID: "c"}},
		{"invalid envelope and payload", header(func(e *Envelope) { e.ID = "" }), make(chan int)},
	} {
		t.Run(tc.name, func(t *testing.T) { checkSealPayloadFrame(t, s, tc.e, tc.payload) })
	}
}
