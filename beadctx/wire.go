package beadctx

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/meshagent/meshagent/protocol"
)

// TopicPrefix begins the mesh topic of every bead context: bead b's
// patches are published on TopicPrefix+b ("beadctx:b"), all in the
// "beadctx" topic family.
const TopicPrefix = "beadctx:"

// Topic returns the mesh topic of bead's patches.
func Topic(bead string) string { return TopicPrefix + bead }

// payload is a patch as published: the envelope's payload. The author is
// the envelope's signer, never a member of the payload.
type payload struct {
	Bead  string          `json:"bead,required"`
	Op    Op              `json:"op,required"`
	HLC   *HLC            `json:"hlc,required"`
	Value json.RawMessage `json:"value,required"`
	// Members is Patch.Members; absent when the patch leaves them.
	Members []string `json:"members,omitempty"`
}

// EncodePayload returns the payload that publishes p (Check'ed) for bead.
func EncodePayload(bead string, p Patch) ([]byte, error) {
	b, err := json.Marshal(payload{Bead: bead, Op: p.Op, HLC: &p.At, Value: p.Value, Members: p.Members})
	if err != nil {
		return nil, fmt.Errorf("beadctx: encode patch: %w", err)
	}
	return b, nil
}

// DecodePayload reads a patch published for a bead, signed by agent at
// envelope time sent, strictly: no unknown or repeated member, each of
// the right JSON type, a valid bead id, a clock within MaxSkew of sent
// (CheckStamp), and a value that passes Patch.Check.
func DecodePayload(data []byte, agent string, sent time.Time) (string, Patch, error) {
	var w payload
	if err := protocol.DecodeStrict(data, &w); err != nil {
		return "", Patch{}, fmt.Errorf("%w: patch: %w", ErrInvalid, err)
	}
	if err := CheckBeadID(w.Bead); err != nil {
		return "", Patch{}, err
	}
	if err := CheckStamp(*w.HLC, sent); err != nil {
		return "", Patch{}, err
	}
	if w.Members != nil && len(w.Members) == 0 {
		return "", Patch{}, fmt.Errorf("%w: patch: an empty members list", ErrInvalid)
	}
	p, err := Patch{At: *w.HLC, Agent: agent, Op: w.Op, Value: w.Value, Members: w.Members}.Check()
	return w.Bead, p, err
}
