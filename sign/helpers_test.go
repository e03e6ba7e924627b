package sign_test

import (
	"bytes"
	"crypto/rand"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/sign"
)

// seed returns the 32-byte seed b, b, …, b. The golden vectors use the seeds
// 0x01…01 and 0x02…02.
func seed(b byte) []byte { return bytes.Repeat([]byte{b}, 32) }

// testKey returns the deterministic Ed25519 key for seed(b).
func testKey(t testing.TB, b byte) crypto.PrivKey {
	t.Helper()
	k, err := sign.KeyFromSeed(seed(b))
	if err != nil {
		t.Fatalf("KeyFromSeed: %v", err)
	}
	return k
}

// testSigner returns a Signer for seed(b).
func testSigner(t testing.TB, b byte) *sign.Signer {
	t.Helper()
	s, err := sign.NewSigner(testKey(t, b))
	if err != nil {
		t.Fatalf("NewSigner: %v", err)
	}
	return s
}

// otherKeyTypes returns keys meshagent must refuse, with the peer IDs they
// produce: secp256k1 and ECDSA (both inline or hashed, never Ed25519).
func otherKeyTypes(t testing.TB) map[string]crypto.PrivKey {
	t.Helper()
	secp, _, err := crypto.GenerateSecp256k1Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecdsa, _, err := crypto.GenerateECDSAKeyPair(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]crypto.PrivKey{"secp256k1": secp, "ecdsa": ecdsa}
}

func mustID(t testing.TB, k crypto.PrivKey) peer.ID {
	t.Helper()
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
