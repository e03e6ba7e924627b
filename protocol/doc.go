// Package protocol is meshagent's shared vocabulary: the AgentProtocol
// envelope (seed 002), capability objects (seed 000), request, response,
// hello and error payloads, error codes, libp2p protocol IDs, stream
// framing and JSON Schema validation.
//
// # Wire format between nodes
//
// Direct streams (HelloProtocol, RequestProtocol) carry frames of
// uvarint(length) ‖ signature(64) ‖ canonical envelope JSON. The receiver
// reads the length (refusing frames above the limit before reading them),
// verifies the Ed25519 signature over the envelope bytes with the key of
// the authenticated remote peer, checks the bytes are RFC 8785 canonical,
// and only then decodes them (Open). The embedded JSON form, with a
// "signature" member, is used at the edges (OpenJSON, SignedJSON).
//
// A delivery receipt is a provider's final response envelope in that
// form, as the caller received it: it proves to anyone, offline, who
// answered which request and how (OpenReceipt, Receipt.Check).
//
// # Decoding what comes from outside
//
// Every JSON object that arrives from another program is decoded by one
// decoder, DecodeStrict, into the typed structs of this package and its
// callers, which are the single source of truth for member names and
// types. Unlike encoding/json it matches member names exactly, refuses a
// member given twice, checks the JSON type of every member against its
// field, and refuses members the type does not declare unless the format
// is open to extensions (AllowUnknown: payloads and capability objects are;
// signed envelopes, JSON-RPC params and configuration files are not).
// Errors are *FieldError naming the member by its path. It scans the text
// once, with the reflection for each type worked out once and cached, and
// whatever it accepts encoding/json would decode to the same value
// (FuzzDecodeStrict).
//
// A receiver that cannot tell the signer from the connection (GossipSub
// relays others' messages) finds it with ClaimedSigner, a prefix scan of
// the signed bytes, so that nothing is parsed before the signature holds.
//
// The package has no host, no network and no goroutines.
package protocol
