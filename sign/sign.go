package sign

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	voi "github.com/oasisprotocol/curve25519-voi/primitives/ed25519"
)

// SignatureSize is the length of an Ed25519 signature.
const SignatureSize = ed25519.SignatureSize

// SignatureField is the member of a JSON message that carries its
// signature in the embedded (edge) form.
const SignatureField = "signature"

// Signer signs with one Ed25519 identity. It is safe for concurrent use.
type Signer struct {
	priv   ed25519.PrivateKey
	id     peer.ID
	idStr  string // id.String(), a base58 encoding every sealed message would repeat
	pubB64 string
}

// NewSigner returns a Signer for an Ed25519 libp2p key.
func NewSigner(k crypto.PrivKey) (*Signer, error) {
	if k == nil || k.Type() != crypto.Ed25519 {
		return nil, ErrUnsupportedKey
	}
	raw, err := k.Raw() // seed ‖ public key, the stdlib layout
	if err != nil || len(raw) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("sign: unexpected Ed25519 key encoding")
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("sign: derive agent id: %w", err)
	}
	priv := ed25519.PrivateKey(raw)
	return &Signer{
		priv:   priv,
		id:     id,
		idStr:  id.String(),
		pubB64: base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey)),
	}, nil
}

// ID returns the signer's agent id.
func (s *Signer) ID() peer.ID { return s.id }

// IDString returns ID().String(), encoded once when the Signer was made.
func (s *Signer) IDString() string { return s.idStr }

// PublicKeyBase64 returns the signer's public key in seed 002's form.
func (s *Signer) PublicKeyBase64() string { return s.pubB64 }

// Sign returns the Ed25519 signature of msg. msg must already be the exact
// bytes to sign (canonical JSON for messages).
//
// Ed25519 signing is deterministic (RFC 8032), so curve25519-voi, about
// twice as fast here as crypto/ed25519 on a call's critical path, returns
// the very bytes crypto/ed25519 would (the golden vectors pin them).
func (s *Signer) Sign(msg []byte) []byte { return voi.Sign(voi.PrivateKey(s.priv), msg) }

// Verify checks sig over msg with the key inlined in the agent id. Lengths
// are checked first, so malformed input is an error, never a panic.
func Verify(id peer.ID, msg, sig []byte) error {
	pub, err := PublicKey(id)
	if err != nil {
		return err
	}
	return VerifyKey(pub, msg, sig)
}

// VerifyKey checks sig over msg with a raw Ed25519 public key. It accepts
// exactly the signatures crypto/ed25519 accepts, but keeps the key's
// expanded form for the next message from the same key.
func VerifyKey(pub ed25519.PublicKey, msg, sig []byte) error {
	if len(pub) != ed25519.PublicKeySize || len(sig) != ed25519.SignatureSize {
		return ErrInvalidSignature
	}
	if !verifyExpanded(pub, msg, sig) {
		return ErrInvalidSignature
	}
	return nil
}

// EncodeSignature returns the base64 form of a signature used in JSON.
func EncodeSignature(sig []byte) string { return base64.StdEncoding.EncodeToString(sig) }

// DecodeSignature parses the base64 form of a signature (standard or URL
// alphabet, padded or not) and checks its length.
func DecodeSignature(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == SignatureSize {
			return b, nil
		}
	}
	return nil, fmt.Errorf("%w: not a base64 Ed25519 signature", ErrInvalidSignature)
}

// Detach splits a JSON object in the embedded form into the canonical bytes
// that were signed (the object without its "signature" member) and the
// signature. The document must be a JSON object without duplicate keys; it
// need not be canonical itself.
func Detach(doc []byte) (body, sig []byte, err error) {
	canon, err := Canonicalize(doc)
	if err != nil {
		return nil, nil, err
	}
	obj, err := decodeObject(canon)
	if err != nil {
		return nil, nil, err
	}
	rawSig, ok := obj[SignatureField]
	if !ok {
		return nil, nil, fmt.Errorf("%w: no %q member", ErrInvalidSignature, SignatureField)
	}
	var s string
	if err := json.Unmarshal(rawSig, &s); err != nil {
		return nil, nil, fmt.Errorf("%w: %q is not a string", ErrInvalidSignature, SignatureField)
	}
	if sig, err = DecodeSignature(s); err != nil {
		return nil, nil, err
	}
	delete(obj, SignatureField)
	if body, err = canonicalObject(obj); err != nil {
		return nil, nil, err
	}
	return body, sig, nil
}

// Attach returns the embedded form of a signed object: body (canonical JSON
// of an object without "signature") with the signature member added, still
// canonical.
func Attach(body, sig []byte) ([]byte, error) {
	// A body that is not canonical would be re-encoded below, and the
	// result would no longer carry the bytes sig was made over.
	if err := CheckCanonical(body); err != nil {
		return nil, err
	}
	obj, err := decodeObject(body)
	if err != nil {
		return nil, err
	}
	if _, ok := obj[SignatureField]; ok {
		return nil, fmt.Errorf("%w: body already has a %q member", ErrInvalidJSON, SignatureField)
	}
	q, _ := json.Marshal(EncodeSignature(sig))
	obj[SignatureField] = q
	return canonicalObject(obj)
}

// SignJSON signs a JSON object in the embedded form: any existing
// "signature" member is replaced. It returns the canonical signed document.
func (s *Signer) SignJSON(doc []byte) ([]byte, error) {
	canon, err := Canonicalize(doc)
	if err != nil {
		return nil, err
	}
	obj, err := decodeObject(canon)
	if err != nil {
		return nil, err
	}
	delete(obj, SignatureField)
	body, err := canonicalObject(obj)
	if err != nil {
		return nil, err
	}
	return Attach(body, s.Sign(body))
}

// decodeObject decodes canonical JSON that must be an object. json.Unmarshal
// alone accepts null, leaving a nil map.
func decodeObject(canon []byte) (map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(canon, &obj); err != nil || obj == nil {
		return nil, fmt.Errorf("%w: not a JSON object", ErrInvalidJSON)
	}
	return obj, nil
}

func canonicalObject(obj map[string]json.RawMessage) ([]byte, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidJSON, err)
	}
	return Canonicalize(b)
}
