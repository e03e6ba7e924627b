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
// The package has no host, no network and no goroutines.
package protocol
