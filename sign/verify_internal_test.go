package sign

import (
	"crypto/ed25519"
	"testing"
)

func TestKeyCacheBoundAndRecency(t *testing.T) {
	c := newKeyCache(2)
	key := func(b byte) ed25519.PublicKey {
		seed := make([]byte, ed25519.SeedSize)
		seed[0] = b
		return ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	}
	k1, k2, k3 := key(1), key(2), key(3)
	e1 := c.get(k1)
	c.get(k2)
	if c.get(k1) != e1 { // a hit returns the cached key and makes k1 recent
		t.Fatal("second get of the same key built it again")
	}
	c.get(k3) // evicts k2, the least recently used
	if n := c.len(); n != 2 {
		t.Fatalf("cache holds %d keys, bound is 2", n)
	}
	if _, ok := c.m[[32]byte(k2)]; ok {
		t.Fatal("the least recently used key was kept")
	}
	if _, ok := c.m[[32]byte(k1)]; !ok {
		t.Fatal("a recently used key was evicted")
	}
	// A key that is not a curve point is refused and not cached.
	bad := make(ed25519.PublicKey, 32)
	bad[0] = 2
	if c.get(bad) != nil {
		t.Fatal("y = 2 is not on the curve, yet it was expanded")
	}
	if n := c.len(); n != 2 {
		t.Fatalf("a refused key was cached (%d keys)", n)
	}
}
