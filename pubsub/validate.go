package pubsub

import (
	"time"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// validate checks one GossipSub message of a family (see the package doc)
// and says why it does not accept it (a reject… reason, "" when it does).
func (tp *Topics) validate(fam string, data []byte, now time.Time) (*protocol.Envelope, libp2ppubsub.ValidationResult, string) {
	e, author, ts, why := tp.open(fam, data)
	if why != "" {
		return nil, libp2ppubsub.ValidationReject, why
	}
	if err := tp.cfg.guard.Check(string(author), e.ID, ts, now); err != nil {
		return nil, libp2ppubsub.ValidationIgnore, rejectReplay
	}
	return e, libp2ppubsub.ValidationAccept, ""
}

// ownMessage is a message this node has just sealed, handed to its own
// validator with the message (GossipSub validates a node's own messages
// too): the envelope is the one signed, so there is nothing to verify or
// decode. Only Publish sets it; a message from a peer never carries it.
type ownMessage struct {
	e *protocol.Envelope
	// flood: send it to every topic peer, not only the mesh (floodNeeded).
	flood bool
}

// validateOwn accepts a message this node sealed, recording it in the
// replay guard as validate does.
func (tp *Topics) validateOwn(own *ownMessage, now time.Time) (libp2ppubsub.ValidationResult, string) {
	ts, err := own.e.Time()
	if err != nil {
		return libp2ppubsub.ValidationReject, rejectMalformed
	}
	if err := tp.cfg.guard.Check(string(tp.signer.ID()), own.e.ID, ts, now); err != nil {
		return libp2ppubsub.ValidationIgnore, rejectReplay
	}
	return libp2ppubsub.ValidationAccept, ""
}

// envelopeOf returns the envelope of an accepted message: the validator
// leaves it in ValidatorData, or the ownMessage Publish put there.
func envelopeOf(vd any) (*protocol.Envelope, bool) {
	switch v := vd.(type) {
	case *protocol.Envelope:
		return v, true
	case *ownMessage:
		return v.e, true
	}
	return nil, false
}

// open verifies and decodes a signed topic message of family fam, as
// GossipSub carries it and as history keepers keep it: everything the
// validator checks but the replay window. why is "" when the message
// holds, else the reason it does not (a reject… reason).
func (tp *Topics) open(fam string, data []byte) (*protocol.Envelope, peer.ID, time.Time, string) {
	if len(data) <= sign.SignatureSize || len(data) > tp.cfg.maxSize {
		return nil, "", time.Time{}, rejectSize
	}
	sig, body := data[:sign.SignatureSize], data[sign.SignatureSize:]
	// The author is named inside the signed bytes: read only that, then
	// verify, and parse the rest only once the signature holds.
	author, err := protocol.ClaimedSigner(body)
	if err != nil {
		return nil, "", time.Time{}, rejectMalformed
	}
	e, err := protocol.Open(body, sig, author)
	if err != nil {
		return nil, "", time.Time{}, rejectSignature
	}
	if e.Type != protocol.TypeNotify || e.To == nil || !e.To.Broadcast || e.To.Topic == "" || Family(e.To.Topic) != fam {
		return nil, "", time.Time{}, rejectMisaddressed
	}
	if _, err := FilterOf(e); err != nil {
		// A filter no receiver can read is refused here, not forwarded.
		return nil, "", time.Time{}, rejectMalformed
	}
	ts, err := e.Time()
	if err != nil {
		return nil, "", time.Time{}, rejectMalformed
	}
	return e, author, ts, ""
}
