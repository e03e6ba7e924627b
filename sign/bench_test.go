package sign_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gowebpki/jcs"

	"github.com/meshagent/meshagent/sign"
)

// envelope1KiB returns a canonical signed-message body of exactly 1024
// bytes: a seed-002 request whose params are padded to size.
func envelope1KiB(b *testing.B) []byte {
	b.Helper()
	ids := agentIDs(b)
	build := func(pad int) []byte {
		doc := ids.Replace(`{"from":{"agentId":"$ID1","capabilities":["agentprotocol:core"],"name":"Freya"},` +
			`"id":"7d444840-9dc0-11d1-b245-5ffdce74fad2","metadata":{"custom-field":"value","priority":"high"},` +
			`"payload":{"action":"code-review","correlationId":"req-123","params":{"code":"function add(a, b) { return a + b; }",` +
			`"language":"javascript","notes":"Grüße 👋 ` + strings.Repeat("x", pad) + `","weights":[0.5,1e+21,-3,42]},"timeout":30000},` +
			`"protocol":"agentprotocol/0.1","timestamp":"2026-02-01T15:08:01Z",` +
			`"to":{"agentId":"$ID2","broadcast":false},"type":"request"}`)
		return []byte(doc)
	}
	doc := build(1024 - len(build(0)))
	if len(doc) != 1024 {
		b.Fatalf("document is %d bytes", len(doc))
	}
	if err := sign.CheckCanonical(doc); err != nil {
		b.Fatal(err)
	}
	return doc
}

func BenchmarkSign(b *testing.B) {
	s := testSigner(b, 1)
	msg := envelope1KiB(b)
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		s.Sign(msg)
	}
}

func BenchmarkVerify(b *testing.B) {
	s := testSigner(b, 1)
	msg := envelope1KiB(b)
	sig := s.Sign(msg)
	id := s.ID()
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if err := sign.Verify(id, msg, sig); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckCanonical1KiB and BenchmarkJCSTransform1KiB run on the same
// canonical 1 KiB message: the receiver's check against a full
// canonicalisation by the reference implementation.
func BenchmarkCheckCanonical1KiB(b *testing.B) {
	doc := envelope1KiB(b)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if err := sign.CheckCanonical(doc); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkJCSTransform1KiB(b *testing.B) {
	doc := envelope1KiB(b)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := jcs.Transform(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCanonicalizeIndented1KiB canonicalises the same message written
// with indentation (the slow path: the check fails, jcs runs, the check
// runs again).
func BenchmarkCanonicalizeIndented1KiB(b *testing.B) {
	var v any
	if err := json.Unmarshal(envelope1KiB(b), &v); err != nil {
		b.Fatal(err)
	}
	doc, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sign.Canonicalize(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDetach1KiB splits a signed message in the embedded form (the
// edges: bus, lobby, files).
func BenchmarkDetach1KiB(b *testing.B) {
	s := testSigner(b, 1)
	signed, err := s.SignJSON(envelope1KiB(b))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(signed)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := sign.Detach(signed); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSignJSON1KiB(b *testing.B) {
	s := testSigner(b, 1)
	doc := envelope1KiB(b)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.SignJSON(doc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplayGuardCheck checks one message after another from one
// sender in steady state: the window holds a thousand ids, and each check
// forgets the oldest as it records the newest.
func BenchmarkReplayGuardCheck(b *testing.B) {
	const held = 1000
	g := sign.NewReplayGuard(time.Second, 0)
	sender := strings.Repeat("s", 38) // a peer ID's length
	ids := make([]string, 4096)
	for i := range ids {
		ids[i] = fmt.Sprintf("%08x-0000-4000-8000-000000000000", i)
	}
	t0 := time.Unix(1700000000, 0)
	step := time.Second / held
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		ts := t0.Add(time.Duration(i) * step)
		if err := g.Check(sender, ids[i%len(ids)], ts, ts); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
