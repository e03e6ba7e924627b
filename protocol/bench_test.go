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
