package sign

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"
)

// JWS (RFC 7515) detached signatures with an agent's key, as A2A signs its
// agent cards: alg EdDSA (Ed25519, RFC 8037), kid the agent id, so that a
// verifier derives the public key from the kid with no lookup.
//
// The signer builds the protected header itself: a caller chooses the
// payload, never the header. The bytes signed are the JWS signing input
// BASE64URL(header) "." BASE64URL(payload), which starts with "eyJ"
// (the encoding of `{"`), so they are never the canonical JSON of a mesh
// envelope (which starts with "{") and a JWS signature cannot be replayed
// as an envelope's.

// JWSHeader is the protected header of an agent's JWS.
type JWSHeader struct {
	Alg string `json:"alg"`
	Kid string `json:"kid"`
	Typ string `json:"typ"`
}

// JWS header values.
const (
	JWSAlg = "EdDSA"
	JWSTyp = "JOSE"
)

// maxJWSHeader bounds the protected header a verifier decodes.
const maxJWSHeader = 1024

var b64url = base64.RawURLEncoding

// SignJWS signs payload as a flattened JWS with a detached payload and
// returns its two base64url members: protected ({"alg":"EdDSA",
// "kid":"<agent id>","typ":"JOSE"}) and signature.
func (s *Signer) SignJWS(payload []byte) (protected, signature string) {
	h, _ := json.Marshal(JWSHeader{Alg: JWSAlg, Kid: s.idStr, Typ: JWSTyp}) // cannot fail
	protected = b64url.EncodeToString(h)
	sig := s.Sign(jwsSigningInput(protected, payload))
	return protected, b64url.EncodeToString(sig)
}

func jwsSigningInput(protected string, payload []byte) []byte {
	in := make([]byte, 0, len(protected)+1+b64url.EncodedLen(len(payload)))
	in = append(in, protected...)
	in = append(in, '.')
	return b64url.AppendEncode(in, payload)
}

// VerifyJWS checks a JWS made by SignJWS (or any signer producing the same
// header) over payload and returns the agent id named by its kid. The
// header must hold exactly alg "EdDSA", a kid that is an Ed25519 agent id,
// and typ "JOSE" if present; the signature must verify under the kid's key.
// Errors wrap ErrInvalidSignature or ErrInvalidAgentID.
func VerifyJWS(protected, signature string, payload []byte) (peer.ID, error) {
	if len(protected) > maxJWSHeader {
		return "", fmt.Errorf("%w: protected header longer than %d bytes", ErrInvalidSignature, maxJWSHeader)
	}
	raw, err := b64url.DecodeString(protected)
	if err != nil {
		return "", fmt.Errorf("%w: protected header is not base64url: %v", ErrInvalidSignature, err)
	}
	var h JWSHeader
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return "", fmt.Errorf("%w: protected header: %v", ErrInvalidSignature, err)
	}
	if dec.More() {
		return "", fmt.Errorf("%w: protected header has data after its object", ErrInvalidSignature)
	}
	if h.Alg != JWSAlg {
		return "", fmt.Errorf("%w: alg %q, want %q", ErrInvalidSignature, h.Alg, JWSAlg)
	}
	if h.Typ != "" && h.Typ != JWSTyp {
		return "", fmt.Errorf("%w: typ %q, want %q", ErrInvalidSignature, h.Typ, JWSTyp)
	}
	id, err := ParseAgentID(h.Kid)
	if err != nil {
		return "", fmt.Errorf("kid: %w", err)
	}
	sig, err := b64url.DecodeString(signature)
	if err != nil {
		return "", fmt.Errorf("%w: signature is not base64url: %v", ErrInvalidSignature, err)
	}
	if err := Verify(id, jwsSigningInput(protected, payload), sig); err != nil {
		return "", err
	}
	return id, nil
}
