package sign_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/meshagent/meshagent/sign"
)

func TestNewSigner(t *testing.T) {
	if _, err := sign.NewSigner(nil); !errors.Is(err, sign.ErrUnsupportedKey) {
		t.Errorf("NewSigner(nil): %v, want ErrUnsupportedKey", err)
	}
	for name, k := range otherKeyTypes(t) {
		if _, err := sign.NewSigner(k); !errors.Is(err, sign.ErrUnsupportedKey) {
			t.Errorf("NewSigner(%s): %v, want ErrUnsupportedKey", name, err)
		}
	}
	k := testKey(t, 1)
	s, err := sign.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	if s.ID() != mustID(t, k) {
		t.Errorf("ID = %s, want %s", s.ID(), mustID(t, k))
	}
}

func TestSignVerify(t *testing.T) {
	s1, s2 := testSigner(t, 1), testSigner(t, 2)
	msg := []byte(`{"hello":"world"}`)
	sig := s1.Sign(msg)
	if len(sig) != sign.SignatureSize {
		t.Fatalf("signature is %d bytes", len(sig))
	}
	if !bytes.Equal(sig, s1.Sign(msg)) {
		t.Error("Ed25519 signatures are deterministic; got two different ones")
	}
	// libp2p's own verifier agrees.
	if ok, err := testKey(t, 1).GetPublic().Verify(msg, sig); !ok || err != nil {
		t.Errorf("libp2p PubKey.Verify = %v, %v", ok, err)
	}
	pub1, _ := sign.PublicKey(s1.ID())

	flipped := func(b []byte, i int) []byte {
		c := bytes.Clone(b)
		c[i] ^= 1
		return c
	}
	tests := []struct {
		name string
		pub  ed25519.PublicKey // for VerifyKey
		id   func() error      // Verify by id, nil to skip
		msg  []byte
		sig  []byte
		ok   bool
	}{
		{name: "valid", pub: pub1, msg: msg, sig: sig, ok: true},
		{name: "tampered message", pub: pub1, msg: []byte(`{"hello":"World"}`), sig: sig},
		{name: "message with a byte appended", pub: pub1, msg: append(bytes.Clone(msg), ' '), sig: sig},
		{name: "empty message", pub: pub1, msg: nil, sig: sig},
		{name: "flipped signature bit (R)", pub: pub1, msg: msg, sig: flipped(sig, 0)},
		{name: "flipped signature bit (S)", pub: pub1, msg: msg, sig: flipped(sig, 63)},
		{name: "wrong key", pub: mustPub(t, s2), msg: msg, sig: sig},
		{name: "nil signature", pub: pub1, msg: msg, sig: nil},
		{name: "63-byte signature", pub: pub1, msg: msg, sig: sig[:63]},
		{name: "65-byte signature", pub: pub1, msg: msg, sig: append(bytes.Clone(sig), 0)},
		{name: "all-zero signature", pub: pub1, msg: msg, sig: make([]byte, 64)},
		{name: "nil public key", pub: nil, msg: msg, sig: sig},
		{name: "31-byte public key", pub: pub1[:31], msg: msg, sig: sig},
		{name: "33-byte public key", pub: append(bytes.Clone(pub1), 0), msg: msg, sig: sig},
		{name: "64-byte public key (a private key)", pub: ed25519.PublicKey(make([]byte, 64)), msg: msg, sig: sig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := sign.VerifyKey(tc.pub, tc.msg, tc.sig)
			if tc.ok {
				if err != nil {
					t.Errorf("VerifyKey: %v", err)
				}
			} else if !errors.Is(err, sign.ErrInvalidSignature) {
				t.Errorf("VerifyKey: %v, want ErrInvalidSignature", err)
			}
		})
	}

	if err := sign.Verify(s1.ID(), msg, sig); err != nil {
		t.Errorf("Verify(signer): %v", err)
	}
	if err := sign.Verify(s2.ID(), msg, sig); !errors.Is(err, sign.ErrInvalidSignature) {
		t.Errorf("Verify(other agent): %v, want ErrInvalidSignature", err)
	}
	for _, n := range []int{0, 1, 63, 65, 128} {
		if err := sign.Verify(s1.ID(), msg, make([]byte, n)); !errors.Is(err, sign.ErrInvalidSignature) {
			t.Errorf("Verify(%d-byte signature): %v, want ErrInvalidSignature", n, err)
		}
	}
}

func mustPub(t *testing.T, s *sign.Signer) ed25519.PublicKey {
	t.Helper()
	pub, err := sign.PublicKey(s.ID())
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

func TestSignerConcurrent(t *testing.T) {
	s := testSigner(t, 1)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				msg := fmt.Appendf(nil, "%d/%d", i, j)
				if err := sign.Verify(s.ID(), msg, s.Sign(msg)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// signatureWithURLUnsafeBase64 returns a signature whose standard base64
// contains '+' or '/'.
func signatureWithURLUnsafeBase64(t *testing.T, s *sign.Signer) []byte {
	t.Helper()
	for i := range 100 {
		sig := s.Sign(fmt.Appendf(nil, "%d", i))
		if strings.ContainsAny(sign.EncodeSignature(sig), "+/") {
			return sig
		}
	}
	t.Fatal("no signature with + or /")
	return nil
}

func TestDecodeSignature(t *testing.T) {
	sig := signatureWithURLUnsafeBase64(t, testSigner(t, 1))
	enc := sign.EncodeSignature(sig)
	if enc != base64.StdEncoding.EncodeToString(sig) {
		t.Errorf("EncodeSignature = %s, want standard padded base64", enc)
	}
	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"std padded", enc, true},
		{"std raw", base64.RawStdEncoding.EncodeToString(sig), true},
		{"url padded", base64.URLEncoding.EncodeToString(sig), true},
		{"url raw", base64.RawURLEncoding.EncodeToString(sig), true},
		{"empty", "", false},
		{"junk", "not base64!", false},
		{"63 bytes", base64.StdEncoding.EncodeToString(sig[:63]), false},
		{"65 bytes", base64.StdEncoding.EncodeToString(append(bytes.Clone(sig), 0)), false},
		{"truncated text", enc[:len(enc)-4], false},
		{"hex", fmt.Sprintf("%x", sig), false},
		{"mixed alphabets", strings.Replace(enc, "+", "-", 1) + "/", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sign.DecodeSignature(tc.in)
			if !tc.ok {
				if !errors.Is(err, sign.ErrInvalidSignature) {
					t.Errorf("DecodeSignature(%q) = %x, %v; want ErrInvalidSignature", tc.in, got, err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, sig) {
				t.Errorf("DecodeSignature(%q) = %x, %v; want %x", tc.in, got, err, sig)
			}
		})
	}
}

// envelope is an unsigned seed-002 envelope as a non-canonical document
// (indented, keys in the seed's order).
func envelope(from, to string) []byte {
	return fmt.Appendf(nil, `{
  "protocol": "agentprotocol/0.1",
  "id": "550e8400-e29b-41d4-a716-446655440000",
  "timestamp": "2026-02-01T15:08:00Z",
  "from": {"agentId": %q, "name": "Freya", "capabilities": ["agentprotocol:core"]},
  "to": {"agentId": %q, "broadcast": false},
  "type": "request",
  "payload": {"action": "code-review", "correlationId": "req-123",
              "params": {"code": "function add(a, b) { return a + b; } // <&>", "language": "javascript"},
              "timeout": 30000.0},
  "metadata": {"priority": "high", "custom-field": "value"}
}`, from, to)
}

func TestSignJSONDetachAttach(t *testing.T) {
	s, other := testSigner(t, 1), testSigner(t, 2)
	doc := envelope(s.ID().String(), other.ID().String())
	canon, err := sign.Canonicalize(doc)
	if err != nil {
		t.Fatal(err)
	}

	signed, err := s.SignJSON(doc)
	if err != nil {
		t.Fatalf("SignJSON: %v", err)
	}
	if err := sign.CheckCanonical(signed); err != nil {
		t.Errorf("SignJSON output is not canonical: %v", err)
	}
	if !bytes.Contains(signed, []byte(`"timeout":30000`)) || !bytes.Contains(signed, []byte(`<&>`)) {
		t.Errorf("SignJSON output is not RFC 8785 (numbers, no HTML escaping): %s", signed)
	}

	body, sig, err := sign.Detach(signed)
	if err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if !bytes.Equal(body, canon) {
		t.Errorf("Detach body\n got %s\nwant %s", body, canon)
	}
	if !bytes.Equal(sig, s.Sign(canon)) {
		t.Error("Detach signature is not the signature of the canonical body")
	}
	if err := sign.Verify(s.ID(), body, sig); err != nil {
		t.Errorf("Verify: %v", err)
	}

	again, err := sign.Attach(body, sig)
	if err != nil || !bytes.Equal(again, signed) {
		t.Errorf("Attach(Detach(signed)) = %s, %v; want %s", again, err, signed)
	}

	// Re-signing replaces the signature member, by any signer.
	if resigned, err := s.SignJSON(signed); err != nil || !bytes.Equal(resigned, signed) {
		t.Errorf("SignJSON(signed) = %s, %v; want it unchanged", resigned, err)
	}
	bySecond, err := other.SignJSON(signed)
	if err != nil {
		t.Fatal(err)
	}
	if b2, sig2, err := sign.Detach(bySecond); err != nil || !bytes.Equal(b2, canon) || sign.Verify(other.ID(), b2, sig2) != nil {
		t.Errorf("SignJSON by a second key did not replace the signature: %v", err)
	}

	// The embedded form need not be canonical: Detach of an indented,
	// reordered copy gives the same bytes and signature.
	loose := append([]byte("{\n  \"signature\" : \""+sign.EncodeSignature(sig)+"\",\n"), doc[1:]...)
	if b2, sig2, err := sign.Detach(loose); err != nil || !bytes.Equal(b2, canon) || !bytes.Equal(sig2, sig) {
		t.Errorf("Detach(non-canonical embedded form) = %s, %x, %v", b2, sig2, err)
	}
	// The signature in another base64 alphabet is the same signature.
	urlForm := bytes.Replace(signed, []byte(sign.EncodeSignature(sig)), []byte(base64.RawURLEncoding.EncodeToString(sig)), 1)
	if _, sig2, err := sign.Detach(urlForm); err != nil || !bytes.Equal(sig2, sig) {
		t.Errorf("Detach(URL-alphabet signature) = %x, %v", sig2, err)
	}
}

func TestDetachTamper(t *testing.T) {
	s, other := testSigner(t, 1), testSigner(t, 2)
	signed, err := s.SignJSON(envelope(s.ID().String(), other.ID().String()))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, old, new string }{
		{"payload number", `"timeout":30000`, `"timeout":30001`},
		{"payload string", `"language":"javascript"`, `"language":"typescript"`},
		{"recipient", other.ID().String(), s.ID().String()},
		{"sender", `"from":{"agentId":"` + s.ID().String(), `"from":{"agentId":"` + other.ID().String()},
		{"broadcast flag", `"broadcast":false`, `"broadcast":true`},
		{"added member", `"type":"request"`, `"type":"request","x":1`},
		{"number spelled differently (same value)", `"timeout":30000`, `"timeout":3e4`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := []byte(strings.Replace(string(signed), tc.old, tc.new, 1))
			if bytes.Equal(doc, signed) {
				t.Fatalf("%q not found in %s", tc.old, signed)
			}
			body, sig, err := sign.Detach(doc)
			if err != nil {
				t.Fatalf("Detach: %v", err)
			}
			err = sign.Verify(s.ID(), body, sig)
			if tc.name == "number spelled differently (same value)" {
				// Canonicalisation makes 3e4 and 30000 the same signed bytes.
				if err != nil {
					t.Errorf("Verify: %v, want success", err)
				}
				return
			}
			if !errors.Is(err, sign.ErrInvalidSignature) {
				t.Errorf("Verify(tampered): %v, want ErrInvalidSignature", err)
			}
		})
	}
}

func TestDetachErrors(t *testing.T) {
	s := testSigner(t, 1)
	sig := sign.EncodeSignature(s.Sign([]byte("x")))
	tests := []struct {
		name string
		doc  string
		want error
	}{
		{"no signature", `{"a":1}`, sign.ErrInvalidSignature},
		{"signature null", `{"a":1,"signature":null}`, sign.ErrInvalidSignature},
		{"signature number", `{"a":1,"signature":1}`, sign.ErrInvalidSignature},
		{"signature object", `{"a":1,"signature":{"sig":"` + sig + `"}}`, sign.ErrInvalidSignature},
		{"signature not base64", `{"a":1,"signature":"!!"}`, sign.ErrInvalidSignature},
		{"signature too short", `{"a":1,"signature":"` + sig[:40] + `"}`, sign.ErrInvalidSignature},
		{"signature empty", `{"a":1,"signature":""}`, sign.ErrInvalidSignature},
		{"signature only in a nested object", `{"a":{"signature":"` + sig + `"}}`, sign.ErrInvalidSignature},
		{"two signatures", `{"signature":"` + sig + `","signature":"` + sig + `"}`, sign.ErrInvalidJSON},
		{"duplicate key", `{"a":1,"a":2,"signature":"` + sig + `"}`, sign.ErrInvalidJSON},
		{"Signature and signature", `{"Signature":"x","signature":"` + sig + `"}`, sign.ErrNotCanonical},
		{"keys differing in case", `{"a":1,"A":2,"signature":"` + sig + `"}`, sign.ErrNotCanonical},
		{"invalid UTF-8", "{\"a\":\"\xff\",\"signature\":\"" + sig + "\"}", sign.ErrInvalidJSON},
		{"not JSON", `{"a":`, sign.ErrInvalidJSON},
		{"empty", ``, sign.ErrInvalidJSON},
		{"array", `["signature"]`, sign.ErrInvalidJSON},
		{"string", `"signature"`, sign.ErrInvalidJSON},
		{"number", `1`, sign.ErrInvalidJSON},
		{"null", `null`, sign.ErrInvalidJSON},
		{"trailing data", `{"signature":"` + sig + `"} {}`, sign.ErrInvalidJSON},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, got, err := sign.Detach([]byte(tc.doc))
			if !errors.Is(err, tc.want) {
				t.Errorf("Detach(%s) = %s, %x, %v; want %v", tc.doc, body, got, err, tc.want)
			}
		})
	}
}

func TestAttachErrors(t *testing.T) {
	sig := testSigner(t, 1).Sign([]byte("x"))
	tests := []struct {
		name string
		body string
		want error
	}{
		{"already signed", `{"a":1,"signature":"x"}`, sign.ErrInvalidJSON},
		{"not canonical: whitespace", `{"a": 1}`, sign.ErrNotCanonical},
		{"not canonical: order", `{"b":1,"a":2}`, sign.ErrNotCanonical},
		{"not canonical: duplicate", `{"a":1,"a":2}`, sign.ErrNotCanonical},
		{"null", `null`, sign.ErrInvalidJSON},
		{"array", `[]`, sign.ErrInvalidJSON},
		{"string", `"a"`, sign.ErrInvalidJSON},
		{"number", `1`, sign.ErrInvalidJSON},
		{"empty", ``, sign.ErrNotCanonical},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := sign.Attach([]byte(tc.body), sig)
			if !errors.Is(err, tc.want) {
				t.Errorf("Attach(%s) = %s, %v; want %v", tc.body, out, err, tc.want)
			}
		})
	}
	// An empty object is a valid body.
	out, err := sign.Attach([]byte(`{}`), sig)
	if err != nil || string(out) != `{"signature":"`+sign.EncodeSignature(sig)+`"}` {
		t.Errorf("Attach({}) = %s, %v", out, err)
	}
}

func TestSignJSONErrors(t *testing.T) {
	s := testSigner(t, 1)
	for _, doc := range []string{``, `null`, `[]`, `[{"a":1}]`, `"x"`, `1`, `true`, `{"a":`, `{"a":1,"a":2}`, `{"a":1,"A":2}`, "{\"a\":\"\xff\"}"} {
		out, err := s.SignJSON([]byte(doc))
		if err == nil {
			t.Errorf("SignJSON(%q) = %s, want an error", doc, out)
		}
		if !errors.Is(err, sign.ErrInvalidJSON) && !errors.Is(err, sign.ErrNotCanonical) {
			t.Errorf("SignJSON(%q): %v, want ErrInvalidJSON or ErrNotCanonical", doc, err)
		}
	}
	// Members other than "signature" named alike are signed, not removed.
	out, err := s.SignJSON([]byte(`{"signatures":[],"sig":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _, err := sign.Detach(out)
	if err != nil || string(body) != `{"sig":"x","signatures":[]}` {
		t.Errorf("body %s, %v", body, err)
	}
}
