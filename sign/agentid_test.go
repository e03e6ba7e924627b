package sign_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/sign"
)

// keyWithURLUnsafeBase64 returns a test key whose standard base64 public key
// contains '+' or '/', so that the standard and URL alphabets differ.
func keyWithURLUnsafeBase64(t *testing.T) crypto.PrivKey {
	t.Helper()
	for b := 1; b < 256; b++ {
		k := testKey(t, byte(b))
		raw, _ := k.GetPublic().Raw()
		if strings.ContainsAny(base64.StdEncoding.EncodeToString(raw), "+/") {
			return k
		}
	}
	t.Fatal("no seed gives a public key with + or / in base64")
	return nil
}

func TestAgentID(t *testing.T) {
	k := testKey(t, 1)
	id, err := sign.AgentID(k.GetPublic())
	if err != nil {
		t.Fatal(err)
	}
	if want := mustID(t, k); id != want {
		t.Errorf("AgentID = %s, want %s", id, want)
	}
	if !strings.HasPrefix(id.String(), "12D3KooW") {
		t.Errorf("agent id %s is not an inline Ed25519 peer ID", id)
	}
	for name, k := range otherKeyTypes(t) {
		if _, err := sign.AgentID(k.GetPublic()); !errors.Is(err, sign.ErrUnsupportedKey) {
			t.Errorf("AgentID(%s): %v, want ErrUnsupportedKey", name, err)
		}
	}
}

func TestParseAgentID(t *testing.T) {
	k := keyWithURLUnsafeBase64(t)
	want := mustID(t, k)
	raw, _ := k.GetPublic().Raw()
	others := otherKeyTypes(t)
	secpID := mustID(t, others["secp256k1"])
	ecdsaID := mustID(t, others["ecdsa"]) // too long to inline: a sha2-256 multihash, like RSA's "Qm…"

	tests := []struct {
		name string
		in   string
		ok   bool
	}{
		{"peer ID", want.String(), true},
		{"peer ID with spaces", "  " + want.String() + "\n", true},
		{"peer ID as CIDv1", peer.ToCid(want).String(), true},
		{"base64 std padded", base64.StdEncoding.EncodeToString(raw), true},
		{"base64 std raw", base64.RawStdEncoding.EncodeToString(raw), true},
		{"base64 url padded", base64.URLEncoding.EncodeToString(raw), true},
		{"base64 url raw", base64.RawURLEncoding.EncodeToString(raw), true},
		{"base64 with spaces", " " + base64.StdEncoding.EncodeToString(raw) + " ", true},

		{"empty", "", false},
		{"blank", " \t\n", false},
		{"junk", "hello", false},
		{"long junk", strings.Repeat("x", 500), false},
		{"truncated peer ID", want.String()[:20], false},
		{"base64 of 31 bytes", base64.StdEncoding.EncodeToString(raw[:31]), false},
		{"base64 of 33 bytes", base64.StdEncoding.EncodeToString(append(raw[:32:32], 0)), false},
		{"base64 of 64 bytes (private key)", base64.StdEncoding.EncodeToString(make([]byte, 64)), false},
		{"hex public key", strings.Repeat("ab", 32), false},
		{"secp256k1 peer ID", secpID.String(), false},
		{"ecdsa (hashed) peer ID", ecdsaID.String(), false},
		{"RSA-style Qm peer ID", "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sign.ParseAgentID(tc.in)
			if !tc.ok {
				if !errors.Is(err, sign.ErrInvalidAgentID) {
					t.Fatalf("ParseAgentID(%q) = %s, %v; want ErrInvalidAgentID", tc.in, got, err)
				}
				if len(err.Error()) > 200 {
					t.Errorf("error message is %d bytes long; junk input is not truncated", len(err.Error()))
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseAgentID(%q): %v", tc.in, err)
			}
			if got != want {
				t.Errorf("ParseAgentID(%q) = %s, want %s", tc.in, got, want)
			}
		})
	}
}

func TestPublicKeyBase64RoundTrip(t *testing.T) {
	for b := byte(1); b <= 8; b++ {
		s := testSigner(t, b)
		id := s.ID()
		b64, err := sign.PublicKeyBase64(id)
		if err != nil {
			t.Fatal(err)
		}
		if b64 != s.PublicKeyBase64() {
			t.Errorf("PublicKeyBase64(id) = %s, Signer.PublicKeyBase64 = %s", b64, s.PublicKeyBase64())
		}
		raw, _ := testKey(t, b).GetPublic().Raw()
		if want := base64.StdEncoding.EncodeToString(raw); b64 != want {
			t.Errorf("PublicKeyBase64 = %s, want standard base64 %s", b64, want)
		}
		back, err := sign.ParseAgentID(b64)
		if err != nil || back != id {
			t.Errorf("ParseAgentID(PublicKeyBase64(%s)) = %s, %v", id, back, err)
		}
		pub, err := sign.PublicKey(id)
		if err != nil {
			t.Fatal(err)
		}
		if len(pub) != ed25519.PublicKeySize || string(pub) != string(raw) {
			t.Errorf("PublicKey(%s) = %x, want %x", id, pub, raw)
		}
	}
}

func TestPublicKeyRefusesBadIDs(t *testing.T) {
	others := otherKeyTypes(t)
	for name, id := range map[string]peer.ID{
		"empty":     "",
		"junk":      peer.ID("junk"),
		"secp256k1": mustID(t, others["secp256k1"]),
		"ecdsa":     mustID(t, others["ecdsa"]),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := sign.PublicKey(id); !errors.Is(err, sign.ErrInvalidAgentID) {
				t.Errorf("PublicKey: %v, want ErrInvalidAgentID", err)
			}
			if _, err := sign.PublicKeyBase64(id); !errors.Is(err, sign.ErrInvalidAgentID) {
				t.Errorf("PublicKeyBase64: %v, want ErrInvalidAgentID", err)
			}
			if err := sign.Verify(id, []byte("m"), make([]byte, sign.SignatureSize)); !errors.Is(err, sign.ErrInvalidAgentID) {
				t.Errorf("Verify: %v, want ErrInvalidAgentID", err)
			}
		})
	}
}
