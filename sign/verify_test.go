package sign_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/meshagent/meshagent/sign"
)

// VerifyKey runs curve25519-voi with cached expanded keys; these tests hold
// it to crypto/ed25519's verdict, which is what every other verifier in the
// mesh (and the golden vectors) assume.

// agrees reports whether VerifyKey and crypto/ed25519 give the same verdict.
func agrees(t testing.TB, pub, msg, sig []byte) bool {
	t.Helper()
	want := len(pub) == ed25519.PublicKeySize && len(sig) == ed25519.SignatureSize && ed25519.Verify(pub, msg, sig)
	got := sign.VerifyKey(pub, msg, sig) == nil
	if got != want {
		t.Errorf("VerifyKey(%x, %q, %x) = %v, crypto/ed25519 says %v", pub, truncateBytes(msg), sig, got, want)
	}
	return want
}

func truncateBytes(b []byte) []byte {
	if len(b) > 48 {
		return b[:48]
	}
	return b
}

// goldenSigned returns (public key, signed bytes, signature) from every
// golden file of sign and protocol, negative vectors included where their
// signature can be taken apart.
func goldenSigned(t testing.TB) (keys [][]byte, msgs, sigs [][]byte) {
	t.Helper()
	var paths []string
	for _, g := range []string{filepath.Join(vectorDir, "*.json"), "../protocol/testdata/envelopes/*.json"} {
		p, err := filepath.Glob(g)
		if err != nil || len(p) == 0 {
			t.Fatalf("no golden files match %s", g)
		}
		paths = append(paths, p...)
	}
	seen := map[string]bool{}
	for _, p := range paths {
		var v struct {
			PublicKey  string `json:"public_key_base64"`
			Canonical  string `json:"canonical"`
			Signature  string `json:"signature"`
			SigBase64  string `json:"signature_base64"`
			Signed     string `json:"signed"`
			SignedJSON string `json:"signed_json"`
		}
		if err := json.Unmarshal(readFile(t, p), &v); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if pub, err := base64.StdEncoding.DecodeString(v.PublicKey); err == nil && !seen[string(pub)] {
			seen[string(pub)] = true
			keys = append(keys, pub)
		}
		for _, s := range []string{v.Signature, v.SigBase64} {
			if sig, err := base64.StdEncoding.DecodeString(s); err == nil && v.Canonical != "" {
				msgs, sigs = append(msgs, []byte(v.Canonical)), append(sigs, sig)
			}
		}
		for _, doc := range []string{v.Signed, v.SignedJSON} {
			if body, sig, err := sign.Detach([]byte(doc)); err == nil {
				msgs, sigs = append(msgs, body), append(sigs, sig)
			}
		}
	}
	return keys, msgs, sigs
}

func TestVerifyKeyAgreesOnGoldenVectors(t *testing.T) {
	keys, msgs, sigs := goldenSigned(t)
	if len(keys) < 2 || len(msgs) < 20 {
		t.Fatalf("only %d keys and %d signed messages in the golden files", len(keys), len(msgs))
	}
	valid := 0
	for i := range msgs {
		for _, pub := range keys {
			if agrees(t, pub, msgs[i], sigs[i]) {
				valid++
			}
			// Every single-bit change of the signature and a changed
			// message must be refused by both.
			for bit := 0; bit < 8*len(sigs[i]); bit += 7 {
				bad := append([]byte(nil), sigs[i]...)
				bad[bit/8] ^= 1 << (bit % 8)
				agrees(t, pub, msgs[i], bad)
			}
			agrees(t, pub, append(append([]byte(nil), msgs[i]...), ' '), sigs[i])
		}
	}
	if valid == 0 {
		t.Fatal("no golden signature verified: the test checks nothing")
	}
}

// Edge cases crypto/ed25519 defines its behaviour on: small-order keys and
// R, non-canonical encodings of A and R, S at or above the group order.
var edgeKeys = [][]byte{
	make([]byte, 32), // y = 0: order 4
	hex32("0100000000000000000000000000000000000000000000000000000000000000"), // identity
	hex32("0000000000000000000000000000000000000000000000000000000000000080"), // -0 (non-canonical sign)
	hex32("ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"), // y = p-1: order 2
	hex32("eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"), // y = p+1: non-canonical identity
	hex32("c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa"), // order 8
	hex32("26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05"), // order 8
	hex32("edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f"), // y = p
}

// groupOrder is ℓ, little-endian: an S of ℓ or more is non-canonical.
var groupOrder = hex32("edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010")

func hex32(s string) []byte {
	b := make([]byte, 32)
	for i := range b {
		b[i] = unhex(s[2*i])<<4 | unhex(s[2*i+1])
	}
	return b
}

func unhex(c byte) byte {
	if c >= 'a' {
		return c - 'a' + 10
	}
	return c - '0'
}

func TestVerifyKeyAgreesOnEdgeCases(t *testing.T) {
	msg := []byte(`{"from":{"agentId":"x"}}`)
	for _, a := range edgeKeys {
		for _, r := range edgeKeys {
			for _, s := range [][]byte{make([]byte, 32), groupOrder, hex32("0100000000000000000000000000000000000000000000000000000000000000")} {
				agrees(t, a, msg, append(append([]byte(nil), r...), s...))
			}
		}
	}
	// A valid signature with ℓ added to S is a malleated copy: both refuse.
	priv := ed25519.NewKeyFromSeed(make([]byte, 32))
	pub := priv.Public().(ed25519.PublicKey)
	sig := ed25519.Sign(priv, msg)
	if !agrees(t, pub, msg, sig) {
		t.Fatal("a fresh signature does not verify")
	}
	agrees(t, pub, msg, append(sig[:32:32], addLE(sig[32:], groupOrder)...))
}

// addLE returns a+b over 32 little-endian bytes (mod 2^256).
func addLE(a, b []byte) []byte {
	out := make([]byte, 32)
	var carry uint16
	for i := range out {
		v := uint16(a[i]) + uint16(b[i]) + carry
		out[i], carry = byte(v), v>>8
	}
	return out
}

// FuzzVerifyKeyDifferential feeds both verifiers random keys, messages and
// signatures, and also derives from each input a real key pair whose
// signature it then malleates (S+ℓ, bit flips, R swapped for an edge
// point): every verdict must match crypto/ed25519's.
//
//	go test ./sign -run '^$' -fuzz FuzzVerifyKeyDifferential -fuzztime 60s -fuzzminimizetime 2s
//
// Each run costs several signatures and verifications, so minimising a new
// input for the default 60s stalls the fuzzer; a short minimise time keeps
// it exploring.
func FuzzVerifyKeyDifferential(f *testing.F) {
	keys, msgs, sigs := goldenSigned(f)
	for i := range msgs {
		f.Add(keys[i%len(keys)], msgs[i], sigs[i], uint8(i))
	}
	for i, a := range edgeKeys {
		f.Add(a, []byte("m"), append(append([]byte(nil), edgeKeys[(i+1)%len(edgeKeys)]...), groupOrder...), uint8(i))
	}
	f.Fuzz(func(t *testing.T, pub, msg, sig []byte, mode uint8) {
		agrees(t, pub, msg, sig)
		if len(pub) < ed25519.SeedSize {
			return
		}
		priv := ed25519.NewKeyFromSeed(pub[:ed25519.SeedSize])
		real := priv.Public().(ed25519.PublicKey)
		good := ed25519.Sign(priv, msg)
		// Signer.Sign (curve25519-voi) must make crypto/ed25519's bytes.
		if got := seedSigner(t, pub[:ed25519.SeedSize]).Sign(msg); !bytes.Equal(got, good) {
			t.Fatalf("Signer.Sign = %x, crypto/ed25519 signs %x", got, good)
		}
		if !agrees(t, real, msg, good) {
			t.Fatal("a fresh signature does not verify")
		}
		bad := append([]byte(nil), good...)
		switch mode % 4 {
		case 0:
			copy(bad[32:], addLE(bad[32:], groupOrder))
		case 1:
			bad[int(mode)%len(bad)] ^= 1 << (mode % 8)
		case 2:
			copy(bad[:32], edgeKeys[int(mode)%len(edgeKeys)])
		case 3:
			copy(bad[32:], groupOrder)
		}
		agrees(t, real, msg, bad)
		if len(sig) == ed25519.SignatureSize {
			agrees(t, real, msg, sig)
		}
	})
}

func seedSigner(t testing.TB, seed []byte) *sign.Signer {
	t.Helper()
	k, err := sign.KeyFromSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	s, err := sign.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSignerSignMatchesCryptoEd25519(t *testing.T) {
	msg := []byte{}
	for i := range 64 {
		seed := bytes.Repeat([]byte{byte(i * 37)}, ed25519.SeedSize)
		seed[0] = byte(i)
		want := ed25519.Sign(ed25519.NewKeyFromSeed(seed), msg)
		if got := seedSigner(t, seed).Sign(msg); !bytes.Equal(got, want) {
			t.Fatalf("seed %x: Signer.Sign = %x, crypto/ed25519 signs %x", seed, got, want)
		}
		msg = append(msg, byte(i), '{')
	}
}
