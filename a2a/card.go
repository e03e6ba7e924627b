package a2a

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// CardCapability is the built-in capability by which a node answers with
// its own Agent Card, signed by its own key (see Card). Its params are
// {"url": "<the JSON-RPC URL the card names>"}.
const CardCapability = protocol.A2ACardCapability

// MaxURLLen bounds the interface URL a card names.
const MaxURLLen = 2048

// maxCardBytes bounds an Agent Card read from a mesh agent or an external
// A2A agent.
const maxCardBytes = 1 << 20

// mediaJSON is the one input and output mode of a mesh agent: a
// capability takes and returns a JSON value.
const mediaJSON = "application/json"

// CheckInterfaceURL checks the URL a card is asked to name: an absolute
// http or https URL of at most MaxURLLen bytes.
func CheckInterfaceURL(raw string) error {
	if raw == "" || len(raw) > MaxURLLen {
		return fmt.Errorf("a2a: interface url must be 1 to %d bytes", MaxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("a2a: interface url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return fmt.Errorf("a2a: interface url %q is not an absolute http(s) URL without credentials", raw)
	}
	return nil
}

// Card builds the unsigned v1.0 Agent Card of a mesh agent: its skills are
// its capabilities (id and name the capability's name, the description
// its own or "mesh capability NAME", tags its keywords or ["mesh"]); its one
// interface is the JSON-RPC endpoint at jsonrpcURL. No member is empty, so
// the card's JCS form is the same in every SDK (the JavaScript SDK drops
// empty members before canonicalising).
func Card(agentID, name string, caps []protocol.Capability, jsonrpcURL string) (AgentCard, error) {
	if err := CheckInterfaceURL(jsonrpcURL); err != nil {
		return AgentCard{}, err
	}
	if name == "" {
		name = "meshagent " + agentID
	}
	streaming := true
	card := AgentCard{
		Name:        name,
		Description: "meshagent mesh agent " + agentID + ": each skill is one of its capabilities; send its params as a data part with the skill in message.metadata.skill",
		SupportedInterfaces: []AgentInterface{{
			URL:             jsonrpcURL,
			ProtocolBinding: TransportJSONRPC,
			ProtocolVersion: ProtocolVersion,
		}},
		Version:            protocol.HelloVersion,
		Capabilities:       &AgentCapabilities{Streaming: &streaming},
		DefaultInputModes:  []string{mediaJSON},
		DefaultOutputModes: []string{mediaJSON},
	}
	sorted := slices.Clone(caps)
	slices.SortFunc(sorted, func(a, b protocol.Capability) int { return cmp.Compare(a.Name, b.Name) })
	for _, c := range sorted {
		if c.Name == "" {
			continue
		}
		desc := c.Description
		if desc == "" {
			desc = "mesh capability " + c.Name
		}
		var tags []string
		for _, k := range c.Keywords {
			if k != "" && !slices.Contains(tags, k) {
				tags = append(tags, k)
			}
		}
		if len(tags) == 0 {
			tags = []string{"mesh"}
		}
		card.Skills = append(card.Skills, AgentSkill{ID: c.Name, Name: c.Name, Description: desc, Tags: tags})
	}
	return card, nil
}

// CanonicalCard returns the bytes an Agent Card signature covers: the JCS
// (RFC 8785) form of the card without its signatures.
func CanonicalCard(card AgentCard) ([]byte, error) {
	card.Signatures = nil
	raw, err := json.Marshal(card)
	if err != nil {
		return nil, fmt.Errorf("a2a: encode card: %w", err)
	}
	canon, err := sign.Canonicalize(raw)
	if err != nil {
		return nil, fmt.Errorf("a2a: canonicalise card: %w", err)
	}
	return canon, nil
}

// JWSSigner signs a payload as a JWS whose protected header it builds
// itself ({"alg":"EdDSA","kid":"<its agent id>","typ":"JOSE"}); *sign.Signer
// is one.
type JWSSigner interface {
	SignJWS(payload []byte) (protected, signature string)
}

// SignCard returns card with s's signature appended.
func SignCard(card AgentCard, s JWSSigner) (AgentCard, error) {
	canon, err := CanonicalCard(card)
	if err != nil {
		return AgentCard{}, err
	}
	p, sig := s.SignJWS(canon)
	card.Signatures = append(slices.Clone(card.Signatures), AgentCardSignature{Protected: p, Signature: sig})
	return card, nil
}

// ErrUnsignedCard is returned by VerifyCard when no signature of the card
// is the expected agent's.
var ErrUnsignedCard = errors.New("a2a: card carries no valid signature of its agent")

// VerifyCard checks that one of card's signatures is agent's own: its kid
// is agent and it verifies over the card's canonical form.
func VerifyCard(card AgentCard, agent peer.ID) error {
	canon, err := CanonicalCard(card)
	if err != nil {
		return err
	}
	var last error
	for _, s := range card.Signatures {
		id, err := sign.VerifyJWS(s.Protected, s.Signature, canon)
		if err == nil && id == agent {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("signed by %s", id)
		}
		last = err
	}
	if last != nil {
		return fmt.Errorf("%w %s: %w", ErrUnsignedCard, agent, last)
	}
	return fmt.Errorf("%w %s: it has no signatures", ErrUnsignedCard, agent)
}

// CardParams are the params of the a2a.card capability.
type CardParams struct {
	URL string `json:"url"`
}

// OwnCard answers the a2a.card capability for a node: it decodes params
// strictly, builds the node's card naming the URL asked for, and signs it
// with s. The signature vouches for the agent's name and skills; the URL is
// the requester's (a gateway's) and the card says so only because the
// requester asked.
func OwnCard(s JWSSigner, agentID, name string, caps []protocol.Capability, params json.RawMessage) (json.RawMessage, error) {
	var p CardParams
	if err := protocol.DecodeStrict(params, &p); err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, `a2a.card takes {"url": "http(s)://…"}: %v`, err)
	}
	card, err := Card(agentID, name, caps, p.URL)
	if err != nil {
		return nil, protocol.Errorf(protocol.CodeInvalidMessage, "%v", err)
	}
	card, err = SignCard(card, s)
	if err != nil {
		return nil, err
	}
	return json.Marshal(card)
}
