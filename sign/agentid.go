package sign

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// AgentID returns the agent id of a key: its libp2p peer ID.
func AgentID(k crypto.PubKey) (peer.ID, error) {
	if k.Type() != crypto.Ed25519 {
		return "", ErrUnsupportedKey
	}
	return peer.IDFromPublicKey(k)
}

// ParseAgentID accepts an agent id in either form seed 002 and meshagent
// use, a peer ID ("12D3KooW…") or a base64 Ed25519 public key (standard or
// URL alphabet, padded or not), and returns the peer ID. It rejects ids that
// do not carry an inline Ed25519 key, since a receiver must verify
// signatures with no lookup.
func ParseAgentID(s string) (peer.ID, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidAgentID)
	}
	idCache.RLock()
	cached, ok := idCache.m[s]
	idCache.RUnlock()
	if ok {
		return cached, nil
	}
	if id, err := peer.Decode(s); err == nil {
		if _, err := PublicKey(id); err != nil {
			return "", err
		}
		idCache.Lock()
		if len(idCache.m) >= pubCacheMax {
			clear(idCache.m)
		}
		idCache.m[s] = id
		idCache.Unlock()
		return id, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		raw, err := enc.DecodeString(s)
		if err != nil || len(raw) != ed25519.PublicKeySize {
			continue
		}
		pk, err := crypto.UnmarshalEd25519PublicKey(raw)
		if err != nil {
			continue
		}
		return peer.IDFromPublicKey(pk)
	}
	return "", fmt.Errorf("%w: %q is neither a peer ID nor a base64 Ed25519 public key", ErrInvalidAgentID, truncate(s, 64))
}

// pubCache memoises peer ID → raw public key: verification happens per
// message and extraction parses a multihash and a protobuf. It is bounded:
// when full it starts over, which costs a re-parse, never correctness.
var pubCache = struct {
	sync.RWMutex
	m map[peer.ID]ed25519.PublicKey
}{m: make(map[peer.ID]ed25519.PublicKey)}

const pubCacheMax = 16384

// idCache memoises valid peer ID strings → peer.ID: callers name agents by
// string on every call, and decoding is base58 plus a multihash parse.
var idCache = struct {
	sync.RWMutex
	m map[string]peer.ID
}{m: make(map[string]peer.ID)}

// PublicKey returns the Ed25519 public key inlined in an agent id. The
// slice is shared with a cache: callers must not modify it.
func PublicKey(id peer.ID) (ed25519.PublicKey, error) {
	pubCache.RLock()
	pub, ok := pubCache.m[id]
	pubCache.RUnlock()
	if ok {
		return pub, nil
	}
	pk, err := id.ExtractPublicKey()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidAgentID, err)
	}
	if pk.Type() != crypto.Ed25519 {
		return nil, fmt.Errorf("%w: %s is not an Ed25519 identity", ErrInvalidAgentID, id)
	}
	raw, err := pk.Raw()
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("%w: bad inline key", ErrInvalidAgentID)
	}
	pub = ed25519.PublicKey(raw)
	pubCache.Lock()
	if len(pubCache.m) >= pubCacheMax {
		clear(pubCache.m)
	}
	pubCache.m[id] = pub
	pubCache.Unlock()
	return pub, nil
}

// PublicKeyBase64 returns seed 002's form of an agent id: the standard
// base64 encoding of the raw Ed25519 public key.
func PublicKeyBase64(id peer.ID) (string, error) {
	pub, err := PublicKey(id)
	if err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(pub), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
