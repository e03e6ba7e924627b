package sign

import (
	"container/list"
	"crypto/ed25519"
	"sync"

	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// stdlibRules makes curve25519-voi accept and reject exactly what
// crypto/ed25519 does (cofactorless, canonical S and R, small-order and
// non-canonical A allowed): a signature valid for one verifier of the mesh
// must be valid for all, whichever library they run.
var stdlibRules = &voi.Options{Verify: voi.VerifyOptionsStdLib}

// expandedCacheMax bounds the expanded public keys kept. Each is about
// 8 KiB (a precomputed multiple table of -A), so the cache stays near
// 8 MiB; a mesh's hot peers fit, and a miss costs one point decompression
// and table build (about a third of a verification).
const expandedCacheMax = 1024

// expandedKeys is an LRU of raw public key → expanded key. Verification of
// the same few peers' messages dominates, and expanding the key is work
// that crypto/ed25519 redoes on every call.
var expandedKeys = newKeyCache(expandedCacheMax)

type keyCache struct {
	mu    sync.Mutex
	max   int
	order *list.List // front is most recently used; values are *keyEntry
	m     map[[ed25519.PublicKeySize]byte]*list.Element
}

type keyEntry struct {
	raw [ed25519.PublicKeySize]byte
	exp *voi.ExpandedPublicKey
}

func newKeyCache(max int) *keyCache {
	return &keyCache{max: max, order: list.New(), m: make(map[[ed25519.PublicKeySize]byte]*list.Element, max)}
}

// get returns the expanded form of pub, building and caching it on a miss.
// It returns nil for a key that is not a point on the curve, which no
// signature verifies under (crypto/ed25519 rejects it the same way); such
// keys are not cached, so junk keys cannot evict real ones.
func (c *keyCache) get(pub ed25519.PublicKey) *voi.ExpandedPublicKey {
	raw := [ed25519.PublicKeySize]byte(pub)
	c.mu.Lock()
	if el, ok := c.m[raw]; ok {
		c.order.MoveToFront(el)
		exp := el.Value.(*keyEntry).exp
		c.mu.Unlock()
		return exp
	}
	c.mu.Unlock()
	// Built outside the lock: two callers racing on a new key both build
	// it, which is cheaper than making every hit wait behind a build.
	exp, err := voi.NewExpandedPublicKey(voi.PublicKey(pub))
	if err != nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.m[raw]; ok {
		c.order.MoveToFront(el)
		return el.Value.(*keyEntry).exp
	}
	c.m[raw] = c.order.PushFront(&keyEntry{raw: raw, exp: exp})
	if c.order.Len() > c.max {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.m, old.Value.(*keyEntry).raw)
	}
	return exp
}

// len returns how many keys are cached.
func (c *keyCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// verifyExpanded checks sig over msg under pub with a cached expanded key,
// with crypto/ed25519's acceptance rules. Lengths must have been checked.
func verifyExpanded(pub ed25519.PublicKey, msg, sig []byte) bool {
	exp := expandedKeys.get(pub)
	return exp != nil && voi.VerifyExpandedWithOptions(exp, msg, sig, stdlibRules)
}
