package protocol

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/sign"
)

func TestMessageTypeValid(t *testing.T) {
	for _, typ := range []MessageType{TypeHello, TypeRequest, TypeResponse, TypeNotify, TypeError} {
		if !typ.Valid() {
			t.Errorf("%q.Valid() = false", typ)
		}
	}
	for _, typ := range []MessageType{"", "HELLO", "Request", "ping", "request "} {
		if typ.Valid() {
			t.Errorf("%q.Valid() = true", typ)
		}
	}
}

func TestEnvelopeValidate(t *testing.T) {
	agent := testSigner(t, 1).ID().String()
	valid := func() *Envelope {
		return &Envelope{
			From:      Sender{AgentID: agent, Name: "Freya"},
			ID:        testID,
			Payload:   json.RawMessage(`{}`),
			Protocol:  Version,
			Timestamp: testTimestamp,
			To:        &Recipient{AgentID: testSigner(t, 2).ID().String()},
			Type:      TypeRequest,
		}
	}
	tests := []struct {
		name   string
		mutate func(e *Envelope)
		want   string // substring of the message; "" means valid
	}{
		{"valid request", func(e *Envelope) {}, ""},
		{"valid hello without to", func(e *Envelope) { e.Type, e.To = TypeHello, nil }, ""},
		{"valid notify broadcast", func(e *Envelope) { e.Type, e.To = TypeNotify, &Recipient{Broadcast: true, Topic: "weather"} }, ""},
		{"valid notify without to", func(e *Envelope) { e.Type, e.To = TypeNotify, nil }, ""},
		{"valid metadata", func(e *Envelope) { e.Metadata = json.RawMessage(`{"priority":"high"}`) }, ""},
		{"valid offset timestamp", func(e *Envelope) { e.Timestamp = "2026-02-01T16:08:00+01:00" }, ""},
		{"valid timestamp without millis", func(e *Envelope) { e.Timestamp = "2026-02-01T15:08:00Z" }, ""},
		{"valid timestamp with nanos", func(e *Envelope) { e.Timestamp = "2026-02-01T15:08:00.123456789Z" }, ""},
		{"valid negative offset", func(e *Envelope) { e.Timestamp = "2026-02-01T10:08:00-05:00" }, ""},
		{"valid offset 23:59", func(e *Envelope) { e.Timestamp = "2026-02-01T15:08:00+23:59" }, ""},
		{"valid id at limit", func(e *Envelope) { e.ID = strings.Repeat("x", MaxIDLen) }, ""},
		{"valid name at limit", func(e *Envelope) { e.From.Name = strings.Repeat("n", MaxNameLen) }, ""},

		{"wrong protocol", func(e *Envelope) { e.Protocol = "agentprotocol/0.2" }, "protocol"},
		{"empty protocol", func(e *Envelope) { e.Protocol = "" }, "protocol"},
		{"empty id", func(e *Envelope) { e.ID = "" }, "id must be"},
		{"long id", func(e *Envelope) { e.ID = strings.Repeat("x", MaxIDLen+1) }, "id must be"},
		{"unknown type", func(e *Envelope) { e.Type = "ping" }, "unknown message type"},
		{"empty type", func(e *Envelope) { e.Type = "" }, "unknown message type"},
		{"missing from.agentId", func(e *Envelope) { e.From.AgentID = "" }, "from.agentId"},
		{"long name", func(e *Envelope) { e.From.Name = strings.Repeat("n", MaxNameLen+1) }, "from.name"},
		{"missing payload", func(e *Envelope) { e.Payload = nil }, "payload"},
		{"payload array", func(e *Envelope) { e.Payload = json.RawMessage(`[]`) }, "payload"},
		{"payload string", func(e *Envelope) { e.Payload = json.RawMessage(`"x"`) }, "payload"},
		{"payload null", func(e *Envelope) { e.Payload = json.RawMessage(`null`) }, "payload"},
		{"metadata array", func(e *Envelope) { e.Metadata = json.RawMessage(`[1]`) }, "metadata"},
		{"metadata null", func(e *Envelope) { e.Metadata = json.RawMessage(`null`) }, "metadata"},
		{"metadata number", func(e *Envelope) { e.Metadata = json.RawMessage(`1`) }, "metadata"},
		{"empty timestamp", func(e *Envelope) { e.Timestamp = "" }, "timestamp"},
		{"timestamp not RFC 3339", func(e *Envelope) { e.Timestamp = "2026-02-01 15:08:00" }, "timestamp"},
		{"timestamp unix seconds", func(e *Envelope) { e.Timestamp = "1769958480" }, "timestamp"},
		{"timestamp hour 25", func(e *Envelope) { e.Timestamp = "2026-02-01T25:08:00Z" }, "timestamp"},
		{"timestamp one-digit hour", func(e *Envelope) { e.Timestamp = "2026-02-01T5:08:00Z" }, "timestamp"},
		{"timestamp comma fraction", func(e *Envelope) { e.Timestamp = "2026-02-01T15:08:00,5Z" }, "timestamp"},
		{"timestamp empty fraction", func(e *Envelope) { e.Timestamp = "2026-02-01T15:08:00.Z" }, "timestamp"},
		{"timestamp offset 24h", func(e *Envelope) { e.Timestamp = "2026-02-01T15:08:00+24:00" }, "timestamp"},
		{"timestamp offset without colon", func(e *Envelope) { e.Timestamp = "2026-02-01T15:08:00+0100" }, "timestamp"},
		{"timestamp without zone", func(e *Envelope) { e.Timestamp = "2026-02-01T15:08:00" }, "timestamp"},
		{"timestamp trailing space", func(e *Envelope) { e.Timestamp = "2026-02-01T15:08:00Z " }, "timestamp"},
		{"timestamp date only", func(e *Envelope) { e.Timestamp = "2026-02-01" }, "timestamp"},
		{"request without to", func(e *Envelope) { e.To = nil }, "to.agentId"},
		{"request with empty to.agentId", func(e *Envelope) { e.To = &Recipient{Topic: "x"} }, "to.agentId"},
		{"response without to", func(e *Envelope) { e.Type, e.To = TypeResponse, nil }, "to.agentId"},
		{"error without to", func(e *Envelope) { e.Type, e.To = TypeError, nil }, "to.agentId"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := valid()
			tc.mutate(e)
			err := e.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			wantCode(t, err, CodeInvalidMessage)
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestEnvelopeValidateTruncatesEchoedInput(t *testing.T) {
	e := testRequest(t)
	e.From.AgentID = testSigner(t, 1).ID().String()
	e.Protocol = strings.Repeat("p", 10000)
	err := e.Validate()
	wantCode(t, err, CodeInvalidMessage)
	if len(err.Error()) > 200 {
		t.Errorf("error echoes %d bytes of hostile input", len(err.Error()))
	}
}

func TestNewAndTime(t *testing.T) {
	before := time.Now().Add(-time.Second)
	e, err := NewEnvelope(TypeNotify, &Recipient{Broadcast: true, Topic: "weather"}, map[string]any{"b": 1, "a": "<x>"})
	if err != nil {
		t.Fatal(err)
	}
	if e.Protocol != Version || e.Type != TypeNotify || e.To.Topic != "weather" {
		t.Errorf("New = %+v", e)
	}
	if got, want := string(e.Payload), `{"a":"<x>","b":1}`; got != want {
		t.Errorf("payload %s, want %s", got, want)
	}
	ts, err := e.Time()
	if err != nil {
		t.Fatal(err)
	}
	if ts.Before(before) || ts.After(time.Now().Add(time.Second)) {
		t.Errorf("timestamp %s is not now", e.Timestamp)
	}
	if !strings.HasSuffix(e.Timestamp, "Z") || len(e.Timestamp) != len("2006-01-02T15:04:05.000Z") {
		t.Errorf("timestamp %q is not UTC with milliseconds", e.Timestamp)
	}
	if _, err := NewEnvelope(TypeNotify, nil, func() {}); err == nil {
		t.Error("New accepted a payload that cannot be marshalled")
	}
}

func TestFormatTime(t *testing.T) {
	loc := time.FixedZone("CET", 3600)
	got := FormatTime(time.Date(2026, 2, 1, 16, 8, 0, 123456789, loc))
	if want := "2026-02-01T15:08:00.123Z"; got != want {
		t.Errorf("FormatTime = %q, want %q", got, want)
	}
}

func TestNewID(t *testing.T) {
	re := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := make(map[string]bool, 1000)
	for range 1000 {
		id := NewID()
		if !re.MatchString(id) {
			t.Fatalf("NewID() = %q, not a UUIDv4", id)
		}
		if seen[id] {
			t.Fatalf("NewID() repeated %q", id)
		}
		seen[id] = true
	}
}

func TestSealOpenRoundTrip(t *testing.T) {
	s := testSigner(t, 1)
	e := testRequest(t)
	e.From.Name = "Freya"
	e.From.Capabilities = []string{"agentprotocol:core"}
	e.From.AgentID = "someone else" // Seal overwrites it
	e.Signature = "stale"           // and clears this
	e.Metadata = json.RawMessage(`{"priority":"high"}`)
	body, sig := seal(t, s, e)

	if e.From.AgentID != s.ID().String() {
		t.Errorf("Seal left from.agentId = %q", e.From.AgentID)
	}
	if e.Signature != "" {
		t.Errorf("Seal left signature %q", e.Signature)
	}
	if err := sign.CheckCanonical(body); err != nil {
		t.Errorf("sealed bytes not canonical: %v", err)
	}
	if len(sig) != sign.SignatureSize {
		t.Errorf("signature is %d bytes", len(sig))
	}
	// Ed25519 is deterministic: sealing again gives identical output.
	body2, sig2 := seal(t, s, testEnvelopeCopy(t, e))
	if !bytes.Equal(body, body2) || !bytes.Equal(sig, sig2) {
		t.Error("sealing the same envelope twice gave different bytes")
	}

	got, err := Open(body, sig, s.ID())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if got.ID != testID || got.Timestamp != testTimestamp || got.Type != TypeRequest || got.Protocol != Version {
		t.Errorf("Open = %+v", got)
	}
	if got.From.AgentID != s.ID().String() || got.From.Name != "Freya" || len(got.From.Capabilities) != 1 {
		t.Errorf("from = %+v", got.From)
	}
	if got.To == nil || got.To.AgentID != e.To.AgentID {
		t.Errorf("to = %+v", got.To)
	}
	if string(got.Metadata) != `{"priority":"high"}` {
		t.Errorf("metadata = %s", got.Metadata)
	}
	if got.Signature != "" {
		t.Errorf("Open set signature %q on a detached envelope", got.Signature)
	}
	from, err := got.Sender()
	if err != nil || from != s.ID() {
		t.Errorf("Sender() = %s, %v", from, err)
	}
	req, err := DecodeRequest(got)
	if err != nil {
		t.Fatal(err)
	}
	if req.Action != "code-review" || req.CorrelationID != "req-123" || req.Timeout != 30000 ||
		string(req.Params) != `{"code":"function add(a, b) { return a + b; }","language":"javascript"}` {
		t.Errorf("request = %+v", req)
	}
}

// TestOpenOwnership checks what the values decoded from a received
// envelope share with the received bytes: nothing after Open, whose caller
// may reuse its buffer.
func TestOpenOwnership(t *testing.T) {
	s := testSigner(t, 1)
	req := testRequest(t)
	req.Metadata = json.RawMessage(`{"priority":"high"}`)
	reqBody, reqSig := seal(t, s, req)
	resp := testEnvelope(t, TypeResponse, &Recipient{AgentID: testSigner(t, 2).ID().String()},
		Response{CorrelationID: "req-123", Status: StatusSuccess, Result: json.RawMessage(`{"ok":[true]}`)})
	respBody, respSig := seal(t, s, resp)
	const params, result = `{"code":"function add(a, b) { return a + b; }","language":"javascript"}`, `{"ok":[true]}`

	for _, tc := range []struct {
		name   string
		open   func(body, sig []byte, signer peer.ID) (*Envelope, error)
		shares bool
	}{
		{"Open", Open, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := bytes.Clone(reqBody)
			e, err := tc.open(body, reqSig, s.ID())
			if err != nil {
				t.Fatal(err)
			}
			r, err := DecodeRequest(e)
			if err != nil {
				t.Fatal(err)
			}
			if string(r.Params) != params {
				t.Fatalf("params = %s", r.Params)
			}
			if !sharesBytes(e.Payload, r.Params) {
				t.Error("the params are a copy of the payload's bytes, not a share of them")
			}
			// Appending to a shared value must not write over the bytes
			// after it.
			_ = append(r.Params, '!')
			_ = append(e.Metadata, '!')
			if !bytes.Equal(body, reqBody) {
				t.Fatal("appending to a decoded value changed the received bytes")
			}
			for i := range body {
				body[i] = 'x' // a reader reusing its buffer
			}
			shared := string(r.Params) != params || string(e.Metadata) != `{"priority":"high"}` || e.Payload[0] != '{'
			if shared != tc.shares {
				t.Errorf("after the bytes were overwritten: params %s, metadata %s; want them shared: %v", r.Params, e.Metadata, tc.shares)
			}
			if r.Action != "code-review" || r.CorrelationID != "req-123" || e.ID != testID || e.Type != TypeRequest {
				t.Errorf("strings changed with the bytes: %+v, %+v", r, e)
			}

			body = bytes.Clone(respBody)
			e, err = tc.open(body, respSig, s.ID())
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeResponse(e)
			if err != nil {
				t.Fatal(err)
			}
			if !sharesBytes(e.Payload, got.Result) {
				t.Error("the result is a copy of the payload's bytes, not a share of them")
			}
			for i := range body {
				body[i] = 'x'
			}
			if (string(got.Result) != result) != tc.shares {
				t.Errorf("after the bytes were overwritten result = %s; want it shared: %v", got.Result, tc.shares)
			}
			if got.CorrelationID != "req-123" || got.Status != StatusSuccess {
				t.Errorf("response = %+v", got)
			}
		})
	}
}

// sharesBytes reports whether part is a slice of whole's array.
func sharesBytes(whole, part []byte) bool {
	i := bytes.Index(whole, part)
	return len(part) > 0 && i >= 0 && &whole[i] == &part[0]
}

func testEnvelopeCopy(t *testing.T, e *Envelope) *Envelope {
	t.Helper()
	c := *e
	c.From.Capabilities = append([]string(nil), e.From.Capabilities...)
	if e.To != nil {
		to := *e.To
		c.To = &to
	}
	return &c
}

func TestSealRejectsInvalid(t *testing.T) {
	s := testSigner(t, 1)
	tests := []struct {
		name   string
		mutate func(e *Envelope)
	}{
		{"no recipient", func(e *Envelope) { e.To = nil }},
		{"bad type", func(e *Envelope) { e.Type = "ping" }},
		{"payload not JSON", func(e *Envelope) { e.Payload = json.RawMessage(`{"a":`) }},
		{"payload with duplicate keys", func(e *Envelope) { e.Payload = json.RawMessage(`{"a":1,"a":2}`) }},
		{"metadata with case-duplicate keys", func(e *Envelope) { e.Metadata = json.RawMessage(`{"a":1,"A":2}`) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := testRequest(t)
			tc.mutate(e)
			body, sig, err := Seal(s, e)
			if err == nil {
				t.Fatalf("Seal accepted it: %s", body)
			}
			if body != nil || sig != nil {
				t.Error("Seal returned bytes with an error")
			}
			wantCode(t, err, CodeInvalidMessage)
		})
	}
}

func TestSealCanonicalisesRawPayload(t *testing.T) {
	s := testSigner(t, 1)
	e := testRequest(t)
	e.Payload = json.RawMessage("{ \"b\" : 1.0 ,\n \"a\" : \"\\u00e9\" }")
	body, sig := seal(t, s, e)
	if !bytes.Contains(body, []byte(`"payload":{"a":"é","b":1}`)) {
		t.Errorf("payload not canonicalised: %s", body)
	}
	if _, err := Open(body, sig, s.ID()); err != nil {
		t.Fatal(err)
	}
}

// canonicalEnvelope returns the canonical bytes of a valid request from
// the agent of seed 0x01, with member replacements applied as string
// substitutions on the canonical text.
func canonicalEnvelope(t *testing.T, replace ...string) []byte {
	t.Helper()
	e := testRequest(t)
	body, _ := seal(t, testSigner(t, 1), e)
	return []byte(strings.NewReplacer(replace...).Replace(string(body)))
}

func TestOpenRejections(t *testing.T) {
	s1, s2 := testSigner(t, 1), testSigner(t, 2)
	body, sig := seal(t, s1, testRequest(t))
	agent1 := s1.ID().String()

	tamperedPayload := bytes.Replace(body, []byte("code-review"), []byte("code-reviex"), 1)
	if bytes.Equal(tamperedPayload, body) {
		t.Fatal("tamper did not apply")
	}
	flipped := bytes.Clone(sig)
	flipped[10] ^= 1

	// Envelopes signed correctly by s1 but whose from.agentId names s2.
	e := testRequest(t)
	foreign, _ := seal(t, s1, e)
	foreign = bytes.Replace(foreign, []byte(agent1), []byte(s2.ID().String()), 1)

	tests := []struct {
		name string
		body []byte
		sig  []byte
		code Code
		msg  string
	}{
		{"forged signature by another key", body, s2.Sign(body), CodeInvalidSignature, "does not verify"},
		{"tampered payload byte", tamperedPayload, sig, CodeInvalidSignature, "does not verify"},
		{"flipped signature bit", body, flipped, CodeInvalidSignature, "does not verify"},
		{"short signature", body, sig[:63], CodeInvalidSignature, ""},
		{"empty signature", body, nil, CodeInvalidSignature, ""},
		{"empty body", nil, s1.Sign(nil), CodeInvalidMessage, ""},
		{"from.agentId names another agent", foreign, s1.Sign(foreign), CodeInvalidSignature, "is not the signer"},
		{"from.agentId is garbage", canonicalEnvelope(t, agent1, "nobody"), nil, CodeInvalidMessage, "from.agentId"},

		// Correctly signed, but not canonical: rejected before decoding.
		{"whitespace", bytes.Replace(body, []byte(`,"id"`), []byte(`, "id"`), 1), nil, CodeInvalidMessage, "canonical"},
		{"trailing newline", append(bytes.Clone(body), '\n'), nil, CodeInvalidMessage, "canonical"},
		{"duplicate key", canonicalEnvelope(t, `"id":`, `"id":"x","id":`), nil, CodeInvalidMessage, "duplicate"},
		{"case duplicate in payload", canonicalEnvelope(t, `"payload":{`, `"payload":{"A":2,"a":1,`), nil, CodeInvalidMessage, "case"},
		{"unsorted keys", canonicalEnvelope(t, `"id":"`+testID+`",`, ``, `"type":"request"`, `"type":"request","id":"`+testID+`"`), nil, CodeInvalidMessage, "order"},
		{"non-canonical number", canonicalEnvelope(t, `"timeout":30000`, `"timeout":3e4`), nil, CodeInvalidMessage, "canonical"},
		{"signature member in signed bytes", canonicalEnvelope(t, `"timestamp":`, `"signature":"`+base64.StdEncoding.EncodeToString(sig)+`","timestamp":`), nil, CodeInvalidMessage, "signature"},
		{"empty signature member in signed bytes", canonicalEnvelope(t, `"timestamp":`, `"signature":"","timestamp":`), nil, CodeInvalidMessage, "signature"},

		// Canonical and signed, but not a valid envelope.
		{"not an object", []byte(`[1,2]`), nil, CodeInvalidMessage, ""},
		{"wrong protocol", canonicalEnvelope(t, Version, "agentprotocol/9"), nil, CodeInvalidMessage, "protocol"},
		{"wrong member type", canonicalEnvelope(t, `"id":"`+testID+`"`, `"id":5`), nil, CodeInvalidMessage, ""},
		{"request without to", canonicalEnvelope(t, `"to":{"agentId":"`+s2.ID().String()+`","broadcast":false},`, ``), nil, CodeInvalidMessage, "to.agentId"},
		{"misspelled member", canonicalEnvelope(t, `"from":`, `"From":`), nil, CodeInvalidMessage, "From"},
		{"misspelled member in from", canonicalEnvelope(t, `{"agentId":`, `{"AgentId":`), nil, CodeInvalidMessage, "AgentId"},
		{"misspelled member in to", canonicalEnvelope(t, `"to":{"agentId":`, `"to":{"AGENTID":`), nil, CodeInvalidMessage, "AGENTID"},
		{"unknown member", canonicalEnvelope(t, `{"from":`, `{"extra":1,"from":`), nil, CodeInvalidMessage, "extra"},
		{"unknown member last", canonicalEnvelope(t, `"type":"request"}`, `"type":"request","zzz":{}}`), nil, CodeInvalidMessage, "zzz"},
		{"unknown member in from", canonicalEnvelope(t, `"},"id":"`, `","zz":true},"id":"`), nil, CodeInvalidMessage, "zz"},
		{"unknown member in to", canonicalEnvelope(t, `"broadcast":false}`, `"broadcast":false,"filter":[]}`), nil, CodeInvalidMessage, "filter"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sig := tc.sig
			if sig == nil && tc.code == CodeInvalidMessage {
				sig = s1.Sign(tc.body) // correctly signed: the check after the signature is what fails
			}
			got, err := Open(tc.body, sig, s1.ID())
			if got != nil {
				t.Errorf("Open returned an envelope with error %v", err)
			}
			wantCode(t, err, tc.code)
			if tc.msg != "" && !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not mention %q", err, tc.msg)
			}
		})
	}
}

func TestOpenUnknownSignerID(t *testing.T) {
	body, sig := seal(t, testSigner(t, 1), testRequest(t))
	_, err := Open(body, sig, "not-a-peer-id")
	wantCode(t, err, CodeInvalidSignature)
}

func TestOpenAcceptsBase64AgentID(t *testing.T) {
	s := testSigner(t, 1)
	body, _ := seal(t, s, testRequest(t))
	for _, form := range []struct {
		name string
		enc  *base64.Encoding
	}{
		{"standard", base64.StdEncoding},
		{"raw url", base64.RawURLEncoding},
	} {
		t.Run(form.name, func(t *testing.T) {
			pub, err := sign.PublicKey(s.ID())
			if err != nil {
				t.Fatal(err)
			}
			b64 := form.enc.EncodeToString(pub)
			alt := bytes.Replace(body, []byte(s.ID().String()), []byte(b64), 1)
			e, err := Open(alt, s.Sign(alt), s.ID())
			if err != nil {
				t.Fatalf("Open with base64 from.agentId: %v", err)
			}
			if e.From.AgentID != b64 {
				t.Errorf("from.agentId rewritten to %q", e.From.AgentID)
			}
			if id, err := e.Sender(); err != nil || id != s.ID() {
				t.Errorf("Sender() = %s, %v; want %s", id, err, s.ID())
			}
			// The base64 form of another agent is still refused.
			other := testSigner(t, 3)
			opub, _ := sign.PublicKey(other.ID())
			wrong := bytes.Replace(body, []byte(s.ID().String()), []byte(form.enc.EncodeToString(opub)), 1)
			_, err = Open(wrong, s.Sign(wrong), s.ID())
			wantCode(t, err, CodeInvalidSignature)
		})
	}
}

func TestSignedJSONOpenJSONRoundTrip(t *testing.T) {
	s := testSigner(t, 1)
	body, sig := seal(t, s, testRequest(t))
	doc, err := SignedJSON(body, sig)
	if err != nil {
		t.Fatal(err)
	}
	if err := sign.CheckCanonical(doc); err != nil {
		t.Errorf("embedded form not canonical: %v", err)
	}
	if !bytes.Contains(doc, []byte(`"signature":"`+sign.EncodeSignature(sig)+`"`)) {
		t.Errorf("embedded form lacks the signature: %s", doc)
	}
	e, gotBody, err := OpenJSON(doc)
	if err != nil {
		t.Fatalf("OpenJSON: %v", err)
	}
	if !bytes.Equal(gotBody, body) {
		t.Errorf("OpenJSON body\n%s\nwant\n%s", gotBody, body)
	}
	if e.Signature != sign.EncodeSignature(sig) {
		t.Errorf("signature = %q", e.Signature)
	}
	// The embedded form need not be canonical itself: pretty-printed input
	// from a file still opens.
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, doc, "", "  "); err != nil {
		t.Fatal(err)
	}
	if _, gotBody, err := OpenJSON(pretty.Bytes()); err != nil || !bytes.Equal(gotBody, body) {
		t.Errorf("OpenJSON(pretty) = %v", err)
	}
	// And the two forms carry the same signature: Open verifies the body
	// OpenJSON extracted.
	if _, err := Open(gotBody, sig, s.ID()); err != nil {
		t.Errorf("Open(body from OpenJSON): %v", err)
	}
	// A body that already has a signature member cannot be wrapped again.
	if _, err := SignedJSON(doc, sig); err == nil {
		t.Error("SignedJSON wrapped a signed document")
	}
}

func TestOpenJSONRejections(t *testing.T) {
	s1, s2 := testSigner(t, 1), testSigner(t, 2)
	body, sig := seal(t, s1, testRequest(t))
	doc, err := SignedJSON(body, sig)
	if err != nil {
		t.Fatal(err)
	}
	sigB64 := sign.EncodeSignature(sig)
	replace := func(old, new string) []byte {
		t.Helper()
		out := strings.Replace(string(doc), old, new, 1)
		if out == string(doc) {
			t.Fatalf("%q not found", old)
		}
		return []byte(out)
	}
	// Signed by s1 with from.agentId naming s2: verified against s2's key.
	e := testRequest(t)
	e.From.AgentID = s2.ID().String()
	e.Protocol = Version
	impostor, err := MarshalCanonical(e)
	if err != nil {
		t.Fatal(err)
	}
	impostorDoc, err := SignedJSON(impostor, s1.Sign(impostor))
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		doc  []byte
		code Code
	}{
		{"tampered payload", replace("code-review", "code-reviex"), CodeInvalidSignature},
		{"tampered timestamp", replace(testTimestamp, "2026-02-01T15:08:01.000Z"), CodeInvalidSignature},
		{"signature of another key", replace(sigB64, sign.EncodeSignature(s2.Sign(body))), CodeInvalidSignature},
		{"signature not base64", replace(sigB64, "!!!"), CodeInvalidSignature},
		{"signature too short", replace(sigB64, sigB64[:20]), CodeInvalidSignature},
		{"signature not a string", replace(`"`+sigB64+`"`, `42`), CodeInvalidSignature},
		{"no signature member", replace(`,"signature":"`+sigB64+`"`, ``), CodeInvalidSignature},
		{"from.agentId is not the signer", impostorDoc, CodeInvalidSignature},
		{"not JSON", []byte(`{"protocol":`), CodeInvalidMessage},
		{"not an object", []byte(`["signature"]`), CodeInvalidMessage},
		{"duplicate member", replace(`{"from":`, `{"id":"x","from":`), CodeInvalidMessage},
		{"case duplicate", replace(`{"from":`, `{"ID":"x","from":`), CodeInvalidMessage},
		{"invalid envelope", replace(`"type":"request"`, `"type":"ping"`), CodeInvalidMessage},
		{"from.agentId is garbage", replace(`"agentId":"`+s1.ID().String(), `"agentId":"nobody`), CodeInvalidMessage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e, b, err := OpenJSON(tc.doc)
			if e != nil || b != nil {
				t.Error("OpenJSON returned data with an error")
			}
			wantCode(t, err, tc.code)
		})
	}
}

func TestDecodeRequest(t *testing.T) {
	tests := []struct {
		name    string
		payload string
		want    *Request
		errMsg  string
	}{
		{"full", `{"action":"a","correlationId":"c","params":{"x":1},"timeout":5}`,
			&Request{Action: "a", CorrelationID: "c", Params: json.RawMessage(`{"x":1}`), Timeout: 5}, ""},
		{"no params", `{"action":"a","correlationId":"c"}`, &Request{Action: "a", CorrelationID: "c"}, ""},
		{"null params", `{"action":"a","correlationId":"c","params":null}`, &Request{Action: "a", CorrelationID: "c", Params: json.RawMessage(`null`)}, ""},
		{"uri action", `{"action":"myagent:translation/en-de","correlationId":"c"}`, &Request{Action: "myagent:translation/en-de", CorrelationID: "c"}, ""},
		{"missing correlationId", `{"action":"a"}`, nil, "correlationId"},
		{"long correlationId", `{"action":"a","correlationId":"` + strings.Repeat("c", MaxIDLen+1) + `"}`, nil, "correlationId"},
		{"missing action", `{"correlationId":"c"}`, nil, "action"},
		{"long action", `{"action":"` + strings.Repeat("a", MaxCapabilityNameLen+1) + `","correlationId":"c"}`, nil, "action"},
		{"negative timeout", `{"action":"a","correlationId":"c","timeout":-1}`, nil, "timeout"},
		{"fractional timeout", `{"action":"a","correlationId":"c","timeout":1.5}`, nil, "request payload"},
		{"params array", `{"action":"a","correlationId":"c","params":[1]}`, nil, "params"},
		{"params string", `{"action":"a","correlationId":"c","params":"x"}`, nil, "params"},
		{"action not a string", `{"action":1,"correlationId":"c"}`, nil, "request payload"},
		{"payload not an object", `[]`, nil, "request payload"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := &Envelope{Type: TypeRequest, Payload: json.RawMessage(tc.payload)}
			got, err := DecodeRequest(e)
			if tc.errMsg != "" {
				wantCode(t, err, CodeInvalidMessage)
				if !strings.Contains(err.Error(), tc.errMsg) {
					t.Errorf("error %q does not mention %q", err, tc.errMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Action != tc.want.Action || got.CorrelationID != tc.want.CorrelationID ||
				got.Timeout != tc.want.Timeout || string(got.Params) != string(tc.want.Params) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDecodeRequestKeepsCorrelationIDOnError(t *testing.T) {
	// The provider answers a bad request with an error that names it, so
	// the correlation id must survive a later check failing.
	e := &Envelope{Type: TypeRequest, Payload: json.RawMessage(`{"correlationId":"c-7","timeout":-3}`)}
	r, err := DecodeRequest(e)
	wantCode(t, err, CodeInvalidMessage)
	if r == nil || r.CorrelationID != "c-7" {
		t.Errorf("request = %+v", r)
	}
}

func TestDecodeResponse(t *testing.T) {
	tests := []struct {
		name     string
		typ      MessageType
		payload  string
		want     *Response
		wantErr  *Error // the remote error carried by an error envelope
		wantCode Code   // a local decoding failure
	}{
		{"success", TypeResponse, `{"correlationId":"c","result":{"ok":true},"status":"success"}`,
			&Response{CorrelationID: "c", Result: json.RawMessage(`{"ok":true}`), Status: StatusSuccess}, nil, ""},
		{"in progress", TypeResponse, `{"correlationId":"c","result":{"done":0.5},"status":"in_progress"}`,
			&Response{CorrelationID: "c", Result: json.RawMessage(`{"done":0.5}`), Status: StatusInProgress}, nil, ""},
		{"status error", TypeResponse, `{"correlationId":"c","status":"error"}`,
			&Response{CorrelationID: "c", Status: StatusError}, nil, ""},
		{"unknown status", TypeResponse, `{"correlationId":"c","status":"done"}`, nil, nil, CodeInvalidMessage},
		{"missing status", TypeResponse, `{"correlationId":"c"}`, nil, nil, CodeInvalidMessage},
		{"missing correlationId", TypeResponse, `{"status":"success"}`, nil, nil, CodeInvalidMessage},
		{"response payload not an object", TypeResponse, `"success"`, nil, nil, CodeInvalidMessage},
		{"error envelope", TypeError,
			`{"code":"CAPABILITY_NOT_SUPPORTED","correlationId":"c","details":{"available":["x"]},"message":"no"}`,
			&Response{CorrelationID: "c", Status: StatusError},
			&Error{Code: CodeCapabilityNotSupported, CorrelationID: "c", Message: "no", Details: json.RawMessage(`{"available":["x"]}`)}, ""},
		{"error envelope with unknown code", TypeError, `{"code":"TEAPOT","correlationId":"c","message":"short and stout"}`,
			&Response{CorrelationID: "c", Status: StatusError},
			&Error{Code: CodeInternalError, CorrelationID: "c", Message: `short and stout (remote code "TEAPOT")`}, ""},
		{"error envelope without code", TypeError, `{"correlationId":"c","message":"m"}`,
			&Response{CorrelationID: "c", Status: StatusError},
			&Error{Code: CodeInternalError, CorrelationID: "c", Message: `m (remote code "")`}, ""},
		{"error payload not an object", TypeError, `[]`, nil, nil, CodeInvalidMessage},
		{"request is not a response", TypeRequest, `{"correlationId":"c","status":"success"}`, nil, nil, CodeInvalidMessage},
		{"notify is not a response", TypeNotify, `{}`, nil, nil, CodeInvalidMessage},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeResponse(&Envelope{Type: tc.typ, Payload: json.RawMessage(tc.payload)})
			switch {
			case tc.wantCode != "":
				wantCode(t, err, tc.wantCode)
				if got != nil {
					t.Errorf("response %+v with a local error", got)
				}
				return
			case tc.wantErr != nil:
				var pe *Error
				if !errors.As(err, &pe) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				if pe.Code != tc.wantErr.Code || pe.CorrelationID != tc.wantErr.CorrelationID ||
					pe.Message != tc.wantErr.Message || string(pe.Details) != string(tc.wantErr.Details) {
					t.Errorf("error %+v, want %+v", pe, tc.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			}
			if got == nil || got.CorrelationID != tc.want.CorrelationID || got.Status != tc.want.Status ||
				string(got.Result) != string(tc.want.Result) {
				t.Errorf("response %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDecodeResponseTruncatesUnknownCode(t *testing.T) {
	code := strings.Repeat("X", 5000)
	_, err := DecodeResponse(&Envelope{Type: TypeError, Payload: json.RawMessage(`{"code":"` + code + `","message":"m"}`)})
	wantCode(t, err, CodeInternalError)
	if len(err.Error()) > 200 {
		t.Errorf("error echoes %d bytes of the remote code", len(err.Error()))
	}
}

func TestStatusFinal(t *testing.T) {
	for s, want := range map[Status]bool{StatusSuccess: true, StatusError: true, StatusInProgress: false, "": false} {
		if got := s.Final(); got != want {
			t.Errorf("%q.Final() = %v", s, got)
		}
	}
}

func TestMarshalCanonical(t *testing.T) {
	tests := []struct {
		name string
		v    any
	}{
		{"html characters", map[string]any{"s": "<a href='x'>&amp;</a>"}},
		{"line separators", map[string]any{"s": "a\u2028b\u2029c"}},
		{"non-ASCII", map[string]any{"é": "日本語", "z": "😀", "a": "\u00e9"}},
		{"control characters", map[string]any{"s": "\x00\x01\b\f\n\r\t\x1f\x7f\"\\/"}},
		{"floats", map[string]any{"a": 1.0, "b": 0.1, "c": 1e21, "d": 1e-7, "e": -0.0, "f": 123456789.125, "g": 5e-324, "h": 1.7976931348623157e308}},
		{"integers", map[string]any{"a": int64(9007199254740991), "b": -1, "c": 0}},
		{"key order by UTF-16", map[string]any{"\U0001F600": 1, "\uFB01": 2, "a": 3, "B": 4}},
		{"nested", map[string]any{"z": []any{map[string]any{"b": nil, "a": true}}, "a": map[string]any{}}},
		{"raw message", json.RawMessage("{ \"b\": [1, 2.50, 1E3], \"a\": \"\\u0041\" }")},
		{"canonical raw message", json.RawMessage(`{"a":"é<>&","b":[1,2.5,null],"c":{"A":true}}`)},
		{"canonical raw scalar", json.RawMessage(`"x"`)},
		{"struct", Request{Action: "<&>", CorrelationID: "c", Params: json.RawMessage(`{"y":1,"x":2}`)}},
		{"error payload", Error{Code: CodeTimeout, Message: "m", Details: json.RawMessage(`{"b":1,"a":2}`)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := MarshalCanonical(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			plain, err := json.Marshal(tc.v)
			if err != nil {
				t.Fatal(err)
			}
			want, err := jcs.Transform(plain)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("MarshalCanonical\n%s\nwant (jcs)\n%s", got, want)
			}
			if err := sign.CheckCanonical(got); err != nil {
				t.Errorf("output not canonical: %v", err)
			}
			if bytes.Contains(got, []byte(`\u003c`)) || bytes.Contains(got, []byte(`\u2028`)) {
				t.Errorf("output has escapes that canonical JSON does not: %s", got)
			}
		})
	}
}

// A canonical raw message takes a fast path: the same bytes, in a copy the
// caller's later changes cannot reach.
func TestMarshalCanonicalRawCopies(t *testing.T) {
	in := json.RawMessage(`{"a":1}`)
	out, err := MarshalCanonical(in)
	if err != nil || string(out) != `{"a":1}` {
		t.Fatalf("MarshalCanonical = %s, %v", out, err)
	}
	in[2] = 'b'
	if string(out) != `{"a":1}` {
		t.Fatalf("the output shares the input's bytes: %s", out)
	}
	if out, err := MarshalCanonical(json.RawMessage(nil)); err != nil || string(out) != "null" {
		t.Fatalf("MarshalCanonical(empty raw) = %s, %v; want null", out, err)
	}
}

func TestMarshalCanonicalRejects(t *testing.T) {
	for name, v := range map[string]any{
		"channel":        make(chan int),
		"NaN":            map[string]any{"x": func() float64 { z := 0.0; return z / z }()},
		"duplicate keys": json.RawMessage(`{"a":1,"a":2}`),
		"case duplicate": json.RawMessage(`{"a":1,"A":2}`),
		"invalid raw":    json.RawMessage(`{"a":}`),
	} {
		t.Run(name, func(t *testing.T) {
			if got, err := MarshalCanonical(v); err == nil {
				t.Errorf("MarshalCanonical = %s, want an error", got)
			}
		})
	}
}

func TestClaimedSigner(t *testing.T) {
	s := testSigner(t, 1)
	body, sig := seal(t, s, testRequest(t))
	id, err := ClaimedSigner(body)
	if err != nil || id != s.ID() {
		t.Fatalf("ClaimedSigner = %s, %v; want %s", id, err, s.ID())
	}
	if _, err := Open(body, sig, id); err != nil {
		t.Fatalf("Open with the claimed signer: %v", err)
	}
	for _, bad := range []string{
		``, `{}`, `{"from":{"agentId":""}}`, `{"from":{"agentId":"bob"}}`,
		`{"from":{"agentId":"` + s.ID().String(), // no closing quote
		`{"from":{"agentId":"12D3\u004booW"}}`,
		`{"from":{"name":"n","agentId":"` + s.ID().String() + `"}}`,
		` {"from":{"agentId":"` + s.ID().String() + `"}}`,
		`{"From":{"agentId":"` + s.ID().String() + `"}}`,
	} {
		if _, err := ClaimedSigner([]byte(bad)); err == nil {
			t.Errorf("ClaimedSigner(%q) accepted it", bad)
		}
	}
}

// FuzzClaimedSigner checks that the prefix scan never names a signer
// other than the one Open accepts, and never refuses bytes Open accepts.
func FuzzClaimedSigner(f *testing.F) {
	for _, g := range readGolden(f) {
		f.Add([]byte(g.Canonical))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		claimed, cerr := ClaimedSigner(body)
		e, err := decodeCanonical(body)
		if err != nil {
			return
		}
		from, err := e.Sender()
		if err != nil {
			return
		}
		if cerr != nil || claimed != from {
			t.Fatalf("ClaimedSigner(%q) = %s, %v; the envelope is from %s", body, claimed, cerr, from)
		}
	})
}
