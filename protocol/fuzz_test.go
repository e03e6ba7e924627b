package protocol

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
	"testing/iotest"

	"github.com/meshagent/meshagent/sign"
)

// FuzzOpen feeds arbitrary signed bytes to Open, once with the fuzzed
// signature (which must never verify by accident) and once signed by the
// fixed signer, so that the decoder behind the signature check is reached.
// Whatever Open accepts must re-validate and re-encode to the bytes that
// were signed, up to members that carry no information (see normalize).
func FuzzOpen(f *testing.F) {
	s := testSigner(f, 1)
	for _, g := range readGolden(f) {
		sig, err := base64.StdEncoding.DecodeString(g.Signature)
		if err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(g.Canonical), sig)
	}
	f.Add([]byte(`{}`), []byte{})
	f.Add([]byte(`{"From":{"agentId":"x"}}`), make([]byte, sign.SignatureSize))
	f.Fuzz(func(t *testing.T, body, sig []byte) {
		if e, err := Open(body, sig, s.ID()); err == nil {
			if !bytes.Equal(sig, s.Sign(body)) {
				t.Fatalf("Open accepted a signature the signer did not make")
			}
			checkOpened(t, s, e, body)
		} else {
			checkProtocolError(t, err)
		}
		e, err := Open(body, s.Sign(body), s.ID())
		if err != nil {
			checkProtocolError(t, err)
			return
		}
		checkOpened(t, s, e, body)
	})
}

// FuzzDecodeEnvelope is FuzzOpen without the cryptography: it runs the
// decoder that Open and OpenJSON run after the signature check, an order of
// magnitude more often per second, with the same invariants.
func FuzzDecodeEnvelope(f *testing.F) {
	s := testSigner(f, 1)
	for _, g := range readGolden(f) {
		f.Add([]byte(g.Canonical))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		e, err := decodeCanonical(body)
		if err != nil {
			checkProtocolError(t, err)
			return
		}
		if from, err := e.Sender(); err != nil || from != s.ID() {
			return // checkOpened expects the fixed signer
		}
		checkOpened(t, s, e, body)
	})
}

// FuzzOpenJSON feeds arbitrary documents to OpenJSON, as they are and after
// the fixed signer has signed them.
func FuzzOpenJSON(f *testing.F) {
	s := testSigner(f, 1)
	for _, g := range readGolden(f) {
		f.Add([]byte(g.SignedJSON))
		f.Add([]byte(g.Canonical))
	}
	f.Add([]byte(`{"signature":""}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		check := func(doc []byte) {
			e, body, err := OpenJSON(doc)
			if err != nil {
				checkProtocolError(t, err)
				return
			}
			sig, err := sign.DecodeSignature(e.Signature)
			if err != nil {
				t.Fatalf("accepted envelope carries signature %q: %v", e.Signature, err)
			}
			again, err := SignedJSON(body, sig)
			if err != nil {
				t.Fatalf("SignedJSON of an accepted envelope: %v", err)
			}
			e2, body2, err := OpenJSON(again)
			if err != nil || !bytes.Equal(body, body2) || e2.Signature != e.Signature {
				t.Fatalf("embedded form does not round-trip: %v", err)
			}
			from, err := e.Sender()
			if err != nil {
				t.Fatalf("accepted envelope has no sender: %v", err)
			}
			if _, err := Open(body, sig, from); err != nil {
				t.Fatalf("Open refuses the body OpenJSON accepted: %v", err)
			}
			e.Signature = ""
			if from == s.ID() {
				checkOpened(t, s, e, body)
			}
		}
		check(doc)
		if signed, err := s.SignJSON(doc); err == nil {
			check(signed)
		}
	})
}

// FuzzFrameReader reads an arbitrary stream delivered in two halves (like
// nats' FuzzParser) and one byte at a time. Neither may panic or return a
// frame over the limit, both must agree with reading it whole, and the
// frames read must re-encode to exactly the bytes consumed, since each
// length has one encoding.
func FuzzFrameReader(f *testing.F) {
	for _, g := range readGolden(f) {
		sig, _ := base64.StdEncoding.DecodeString(g.Signature)
		frame := AppendSignedFrame(nil, sig, []byte(g.Canonical))
		f.Add(frame, uint(len(frame)/2), uint16(0))
		f.Add(append(bytes.Clone(frame), frame...), uint(3), uint16(len(frame)))
	}
	f.Add([]byte{0x80, 0x00}, uint(1), uint16(10))
	f.Add(bytes.Repeat([]byte{0xff}, 12), uint(5), uint16(10))
	f.Add([]byte{0x03, 'a', 'b', 'c', 0x01}, uint(2), uint16(3))
	f.Fuzz(func(t *testing.T, data []byte, split uint, limit uint16) {
		max := int(limit)
		if max <= 0 {
			max = DefaultMaxFrameSize
		}
		split %= uint(len(data) + 1)
		whole := readFrames(t, bytes.NewReader(data), int(limit), max)
		halves := readFrames(t, io.MultiReader(bytes.NewReader(data[:split]), bytes.NewReader(data[split:])), int(limit), max)
		bytewise := readFrames(t, iotest.OneByteReader(bytes.NewReader(data)), int(limit), max)
		for name, got := range map[string]frameResult{"halves": halves, "one byte at a time": bytewise} {
			if got.err != whole.err || len(got.frames) != len(whole.frames) {
				t.Fatalf("%s: %d frames then %v; whole: %d frames then %v", name, len(got.frames), got.err, len(whole.frames), whole.err)
			}
			for i := range got.frames {
				if !bytes.Equal(got.frames[i], whole.frames[i]) {
					t.Fatalf("%s: frame %d differs", name, i)
				}
			}
		}
		var re []byte
		for _, fr := range whole.frames {
			re = AppendFrame(re, fr)
		}
		if !bytes.HasPrefix(data, re) {
			t.Fatalf("frames do not re-encode to the bytes they came from")
		}
		if whole.err == "EOF" && len(re) != len(data) {
			t.Fatalf("clean EOF after %d of %d bytes", len(re), len(data))
		}
	})
}

type frameResult struct {
	frames [][]byte
	err    string // error class
}

func readFrames(t *testing.T, r io.Reader, limit, max int) frameResult {
	fr := NewFrameReader(bufio.NewReaderSize(r, 16), limit)
	var res frameResult
	for {
		b, err := fr.Next()
		if err != nil {
			if b != nil {
				t.Fatalf("Next returned %d bytes with %v", len(b), err)
			}
			switch {
			case err == io.EOF:
				res.err = "EOF"
			case err == io.ErrUnexpectedEOF:
				res.err = "unexpected EOF"
			case errors.Is(err, ErrFrameTooLarge):
				res.err = "too large"
			case errors.Is(err, ErrBadFrame):
				res.err = "bad frame"
			default:
				t.Fatalf("unexpected error %v", err)
			}
			return res
		}
		if len(b) > max {
			t.Fatalf("frame of %d bytes, limit %d", len(b), max)
		}
		res.frames = append(res.frames, bytes.Clone(b))
	}
}

// FuzzDecodeRequest decodes arbitrary payloads as request, response and
// error envelopes.
func FuzzDecodeRequest(f *testing.F) {
	for _, g := range readGolden(f) {
		var e Envelope
		if err := json.Unmarshal([]byte(g.Canonical), &e); err != nil {
			f.Fatal(err)
		}
		f.Add([]byte(e.Payload))
	}
	f.Add([]byte(`{"action":"a","correlationId":"c","params":null,"timeout":-0}`))
	f.Add([]byte(`{"code":"TEAPOT","message":"m"}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		if r, err := DecodeRequest(&Envelope{Type: TypeRequest, Payload: payload}); err != nil {
			checkProtocolError(t, err)
		} else {
			// Params shared with the payload (shareRaw) are what a copy holds.
			var c Request
			if err := DecodePayload(payload, "request payload", &c); err != nil || !reflect.DeepEqual(&c, r) {
				t.Fatalf("shared %+v, copied %+v (%v)", r, &c, err)
			}
		}
		// Receivers decode payloads only after the envelope passed
		// sign.CheckCanonical, so the round trip is required of canonical
		// payloads (raw ones may hold invalid UTF-8, which encoding/json
		// copies into a RawMessage unchecked).
		if canon, err := sign.Canonicalize(payload); err == nil {
			checkRequestRoundTrip(t, canon)
		}

		resp, err := DecodeResponse(&Envelope{Type: TypeResponse, Payload: payload})
		if err != nil {
			checkProtocolError(t, err)
		} else if resp.CorrelationID == "" || (resp.Status != StatusSuccess && resp.Status != StatusError && resp.Status != StatusInProgress) {
			t.Fatalf("accepted response %+v", resp)
		}

		resp, err = DecodeResponse(&Envelope{Type: TypeError, Payload: payload})
		if err == nil {
			t.Fatal("an error envelope decoded without an error")
		}
		checkProtocolError(t, err)
		if resp != nil && resp.Status != StatusError {
			t.Fatalf("error envelope decoded to status %q", resp.Status)
		}
	})
}

// checkRequestRoundTrip decodes a canonical request payload and, if it is
// accepted, checks it can be sent on: it encodes canonically and decodes to
// the same request.
func checkRequestRoundTrip(t *testing.T, payload []byte) {
	t.Helper()
	r, err := DecodeRequest(&Envelope{Type: TypeRequest, Payload: payload})
	if err != nil {
		checkProtocolError(t, err)
		return
	}
	if r.CorrelationID == "" || len(r.CorrelationID) > MaxIDLen || r.Action == "" ||
		len(r.Action) > MaxCapabilityNameLen || r.Timeout < 0 {
		t.Fatalf("accepted request %+v", r)
	}
	if len(r.Params) > 0 && r.Params[0] != '{' && string(r.Params) != "null" {
		t.Fatalf("accepted params %s", r.Params)
	}
	canon, err := MarshalCanonical(r)
	if err != nil {
		t.Fatalf("MarshalCanonical(%+v): %v", r, err)
	}
	r2, err := DecodeRequest(&Envelope{Type: TypeRequest, Payload: canon})
	if err != nil {
		t.Fatalf("re-encoded request refused: %v", err)
	}
	p1, _ := MarshalCanonical(r.Params)
	p2, _ := MarshalCanonical(r2.Params)
	if r2.Action != r.Action || r2.CorrelationID != r.CorrelationID || r2.Timeout != r.Timeout || !bytes.Equal(p1, p2) {
		t.Fatalf("request changed in a round trip: %+v -> %+v", r, r2)
	}
}

// checkProtocolError fails unless err is an *Error with a known code.
func checkProtocolError(t *testing.T, err error) {
	t.Helper()
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %T %v is not an *Error", err, err)
	}
	if !pe.Code.Valid() {
		t.Fatalf("error has unknown code %q", pe.Code)
	}
}

// checkOpened asserts the properties of an envelope Open accepted from
// body signed by s.
func checkOpened(t *testing.T, s *sign.Signer, e *Envelope, body []byte) {
	t.Helper()
	if err := e.Validate(); err != nil {
		t.Fatalf("accepted envelope does not validate: %v", err)
	}
	if from, err := e.Sender(); err != nil || from != s.ID() {
		t.Fatalf("accepted envelope from %v (%v), signer %s", from, err, s.ID())
	}
	re, err := MarshalCanonical(e)
	if err != nil {
		t.Fatalf("accepted envelope does not re-encode: %v", err)
	}
	if !bytes.Equal(normalize(t, re), normalize(t, body)) {
		t.Fatalf("accepted envelope re-encodes differently:\nsigned %s\nre-enc %s", body, re)
	}
	// Re-encoding is a fixed point: the re-encoded envelope decodes to
	// the same bytes again.
	e2, err := decodeCanonical(re)
	if err != nil {
		t.Fatalf("re-encoded envelope refused: %v\n%s", err, re)
	}
	re2, err := MarshalCanonical(e2)
	if err != nil || !bytes.Equal(re, re2) {
		t.Fatalf("re-encoding is not stable:\n%s\n%s", re, re2)
	}
}

// normalize drops the members whose absence means the same as their
// presence: an empty from.name, empty or null from.capabilities, a null to,
// an empty to.agentId or to.topic, and a false to.broadcast. Everything
// else, including payload and metadata, must survive decoding exactly.
func normalize(t *testing.T, doc []byte) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatalf("normalize %s: %v", doc, err)
	}
	drop := func(obj map[string]any, key string, empty ...any) {
		v, ok := obj[key]
		if !ok {
			return
		}
		if v == nil {
			delete(obj, key)
			return
		}
		if a, ok := v.([]any); ok && len(a) == 0 {
			delete(obj, key)
			return
		}
		for _, e := range empty {
			if v == e {
				delete(obj, key)
			}
		}
	}
	if from, ok := m["from"].(map[string]any); ok {
		drop(from, "name", "")
		drop(from, "capabilities")
	}
	drop(m, "to")
	if to, ok := m["to"].(map[string]any); ok {
		drop(to, "agentId", "")
		drop(to, "topic", "")
		drop(to, "broadcast", false)
	}
	out, err := MarshalCanonical(m)
	if err != nil {
		t.Fatalf("normalize %s: %v", doc, err)
	}
	return out
}
