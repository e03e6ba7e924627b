package protocol

import (
	"encoding/json"
	"strings"
	"testing"
)

// request1KiB returns a request envelope whose sealed bytes are 1 KiB.
func request1KiB(b *testing.B) *Envelope {
	b.Helper()
	s := testSigner(b, 1)
	to := &Recipient{AgentID: testSigner(b, 2).ID().String()}
	build := func(n int) (*Envelope, int) {
		params, err := json.Marshal(map[string]string{"language": "en", "text": strings.Repeat("x", n)})
		if err != nil {
			b.Fatal(err)
		}
		e := testEnvelope(b, TypeRequest, to, Request{Action: "summarize", CorrelationID: "req-123", Params: params, Timeout: 30000})
		body, _ := seal(b, s, e)
		return e, len(body)
	}
	_, size := build(0)
	e, size := build(1024 - size)
	if size != 1024 {
		b.Fatalf("envelope is %d bytes, want 1024", size)
	}
	return e
}

func BenchmarkSealRequest1KiB(b *testing.B) {
	s := testSigner(b, 1)
	e := request1KiB(b)
	b.SetBytes(1024)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Seal(s, e); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkOpenRequest1KiB(b *testing.B) {
	s := testSigner(b, 1)
	body, sig := seal(b, s, request1KiB(b))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Open(body, sig, s.ID()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeRequest1KiB is Open without the signature check: the
// canonical check, the member check, decoding and validation.
func BenchmarkDecodeRequest1KiB(b *testing.B) {
	s := testSigner(b, 1)
	body, _ := seal(b, s, request1KiB(b))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeCanonical(body); err != nil {
			b.Fatal(err)
		}
	}
}

// decodePayloadBefore is DecodePayload as it was before DecodeStrict:
// encoding/json, then the type error mapped to a message. It stays here
// as the benchmark's baseline.
func decodePayloadBefore(raw []byte, v any) error {
	if err := json.Unmarshal(raw, v); err != nil {
		return Errorf(CodeInvalidMessage, "payload: %v", err)
	}
	return nil
}

// decodeBenchInputs are payloads as they arrive: a request with 1 KiB of
// params, a hello with capability objects, a heartbeat.
func decodeBenchInputs(b *testing.B) []struct {
	name string
	raw  []byte
	new  func() any
} {
	b.Helper()
	req, err := json.Marshal(Request{Action: "summarize", CorrelationID: "req-123", Timeout: 30000,
		Params: json.RawMessage(`{"language":"en","text":"` + strings.Repeat("x", 1000) + `"}`)})
	if err != nil {
		b.Fatal(err)
	}
	caps := make([]Capability, 8)
	for i := range caps {
		caps[i] = Capability{Name: "cap" + strings.Repeat("x", i), Description: "does a thing", Keywords: []string{"a", "b"},
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`)}
	}
	hello, err := json.Marshal(Hello{Capabilities: caps, Features: []string{"tasks", "presence"}, Seq: 12345, Version: Version})
	if err != nil {
		b.Fatal(err)
	}
	hb, err := json.Marshal(Heartbeat{AgentID: "12D3KooWNmhA9NDeN7QxmnSy3XCuggwjKdFUFur6oAez2Kaioh4a", Addrs: []string{"/ip4/1.2.3.4/tcp/1"},
		Capabilities: []string{"echo", "upper"}, CapabilityDigest: strings.Repeat("ab", 32), InFlight: 1, IntervalMS: 5000, Load: 0.25,
		MaxConcurrent: 4, Name: "n", Status: StatusAvailable})
	if err != nil {
		b.Fatal(err)
	}
	return []struct {
		name string
		raw  []byte
		new  func() any
	}{
		{"request", req, func() any { return new(Request) }},
		{"hello", hello, func() any { return new(Hello) }},
		{"heartbeat", hb, func() any { return new(Heartbeat) }},
	}
}

// BenchmarkDecode compares DecodeStrict with encoding/json and with
// DecodePayload as it was (encoding/json and an error mapping) on the
// same inputs.
func BenchmarkDecode(b *testing.B) {
	for _, in := range decodeBenchInputs(b) {
		b.Run(in.name+"/strict", func(b *testing.B) {
			b.SetBytes(int64(len(in.raw)))
			b.ReportAllocs()
			for b.Loop() {
				if err := DecodeStrict(in.raw, in.new(), AllowUnknown()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(in.name+"/payload", func(b *testing.B) {
			b.SetBytes(int64(len(in.raw)))
			b.ReportAllocs()
			for b.Loop() {
				if err := DecodePayload(in.raw, "payload", in.new()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(in.name+"/payload-before", func(b *testing.B) {
			b.SetBytes(int64(len(in.raw)))
			b.ReportAllocs()
			for b.Loop() {
				if err := decodePayloadBefore(in.raw, in.new()); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(in.name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(in.raw)))
			b.ReportAllocs()
			for b.Loop() {
				if err := json.Unmarshal(in.raw, in.new()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeRequestPayload is the part of SealPayloadFrameInto that
// encodes a 1 KiB request into a frame, without the signature: its params
// its params checked for canonical form.
func BenchmarkEncodeRequestPayload(b *testing.B) {
	e := request1KiB(b)
	var req Request
	if err := json.Unmarshal(e.Payload, &req); err != nil {
		b.Fatal(err)
	}
	e.Payload = nil
	buf := make([]byte, 0, 4096)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, ok := e.appendCanonicalWith(buf, frameHeadroom, &req); !ok {
			b.Fatal("not encoded")
		}
	}
}
