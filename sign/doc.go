// Package sign holds meshagent's identity and signing primitives: Ed25519
// key files, the agent id (a libp2p peer ID) and its base64 public-key form,
// RFC 8785 canonical JSON, signatures over canonical bytes, and a replay
// guard.
//
// # What is signed
//
// A message is signed by computing Ed25519 over the RFC 8785 canonical JSON
// of the message object without its "signature" member (seed 002). Any
// implementation that sorts keys recursively and serialises without
// whitespace, as JavaScript's JSON.stringify with sorted keys does, signs
// the same bytes (a test checks this against Node.js). Python's
// json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
// agrees for ASCII keys and integers, but sorts keys by code point rather
// than UTF-16 unit and prints some floats differently (1e-07): use an
// RFC 8785 library there. testdata/ pins golden vectors.
//
// Between nodes the canonical bytes travel as they were signed, with the
// signature beside them rather than inside, so that a receiver verifies the
// bytes it read before parsing them. The JSON form with an embedded
// "signature" member (Signer.SignJSON here; protocol.OpenJSON verifies and
// decodes it) is for the edges and for offline verification; both forms
// carry the same signature.
//
// # Strictness
//
// Signed bytes must be canonical: CheckCanonical rejects whitespace,
// unsorted or duplicate keys, keys in one object that differ only in case
// (Go's encoding/json matches keys case-insensitively, so such a pair would
// be ambiguous to a Go receiver), invalid UTF-8, non-canonical escapes and
// non-canonical numbers. A receiver checks this before decoding, so no
// lenient decoder ever sees signed material first.
//
// # Verification
//
// Verification runs curve25519-voi with each key's expanded form (a
// precomputed table of -A) kept in a bounded LRU, since a node verifies
// many messages from few peers and crypto/ed25519 re-expands the key every
// time. It uses voi's crypto/ed25519-compatible rules (cofactorless, S and
// R canonical, small-order and non-canonical A allowed), so every node
// accepts exactly the signatures the standard library does; tests hold it
// to crypto/ed25519 on the golden vectors, on edge-case points and by
// differential fuzzing. Signing uses curve25519-voi too: Ed25519 signatures
// are deterministic, so its bytes are crypto/ed25519's (the golden vectors
// pin them), made in about half the time.
//
// This package is the leaf of meshagent: it imports nothing of the project
// and no network code.
package sign
