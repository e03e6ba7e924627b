package protocol

import (
	"encoding/json"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MetaOnBehalfOf is the request metadata member by which an agent vouches
// for one of its own clients: a relay that calls a mesh agent for a lobby
// client or an authenticated bus client signs the request itself and puts
// the client's name here, e.g. "metadata":{"onBehalfOf":"lobby:alice"}.
// The name is covered by the agent's signature, so it is exactly as
// trustworthy as that agent: a provider can tell the relay's clients apart
// (authorized_requester_ids and policy entries "<agent id>/<client>") but
// a client is only ever vouched for by the agent that signed the request.
// An agent asking for itself leaves the member out.
const MetaOnBehalfOf = "onBehalfOf"

// MaxOnBehalfOfLen bounds a vouched client name, in bytes.
const MaxOnBehalfOfLen = 512

// CheckOnBehalfOf checks a vouched client name: 1 to MaxOnBehalfOfLen
// bytes of valid UTF-8, without whitespace or control characters, and
// without "*" (which ACL and policy entries use as a wildcard). The error
// is INVALID_MESSAGE.
func CheckOnBehalfOf(client string) error {
	switch {
	case client == "" || len(client) > MaxOnBehalfOfLen:
		return Errorf(CodeInvalidMessage, "metadata.%s must be 1 to %d bytes", MetaOnBehalfOf, MaxOnBehalfOfLen)
	case !utf8.ValidString(client):
		return Errorf(CodeInvalidMessage, "metadata.%s is not valid UTF-8", MetaOnBehalfOf)
	case strings.ContainsFunc(client, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) || r == '*' }):
		return Errorf(CodeInvalidMessage, "metadata.%s %q must not contain whitespace, control characters or '*'", MetaOnBehalfOf, truncate(client, 64))
	}
	return nil
}

// OnBehalfOf returns the client a request envelope's signer vouches for
// (metadata member MetaOnBehalfOf), or "" when the signer asks for itself.
// Metadata that is not an object, or an onBehalfOf that is not a string
// CheckOnBehalfOf accepts, is INVALID_MESSAGE. Other metadata members are
// left alone.
func OnBehalfOf(e *Envelope) (string, error) {
	md := e.Metadata
	if len(md) == 0 || string(md) == "null" {
		return "", nil
	}
	var members struct {
		OnBehalfOf json.RawMessage `json:"onBehalfOf"`
	}
	if md[0] != '{' || DecodeStrict(md, &members, AllowUnknown()) != nil {
		return "", Errorf(CodeInvalidMessage, "metadata must be a JSON object")
	}
	raw := members.OnBehalfOf
	if raw == nil {
		return "", nil
	}
	var client string
	if raw[0] != '"' || DecodeStrict(raw, &client) != nil {
		return "", Errorf(CodeInvalidMessage, "metadata.%s must be a string", MetaOnBehalfOf)
	}
	if err := CheckOnBehalfOf(client); err != nil {
		return "", err
	}
	return client, nil
}

// OnBehalfOfMetadata returns the canonical request metadata vouching for
// client, or nil for "".
func OnBehalfOfMetadata(client string) (json.RawMessage, error) {
	if client == "" {
		return nil, nil
	}
	if err := CheckOnBehalfOf(client); err != nil {
		return nil, err
	}
	return MarshalCanonical(map[string]string{MetaOnBehalfOf: client})
}
