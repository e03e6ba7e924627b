package pubsub

import (
	"time"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// validate checks one GossipSub message of a family (see the package doc).
func (b *Topics) validate(fam string, data []byte, now time.Time) (*protocol.Envelope, libp2ppubsub.ValidationResult) {
	e, author, ts, ok := b.open(fam, data)
	if !ok {
		return nil, libp2ppubsub.ValidationReject
	}
	if err := b.cfg.guard.Check(string(author), e.ID, ts, now); err != nil {
		return nil, libp2ppubsub.ValidationIgnore
	}
	return e, libp2ppubsub.ValidationAccept
}

// open verifies and decodes a signed topic message of family fam, as
// GossipSub carries it and as history keepers keep it: everything the
// validator checks but the replay window.
func (b *Topics) open(fam string, data []byte) (*protocol.Envelope, peer.ID, time.Time, bool) {
	if len(data) <= sign.SignatureSize || len(data) > b.cfg.maxSize {
		return nil, "", time.Time{}, false
	}
	sig, body := data[:sign.SignatureSize], data[sign.SignatureSize:]
	// The author is named inside the signed bytes: read only that, then
	// verify, and parse the rest only once the signature holds.
	author, err := protocol.ClaimedSigner(body)
	if err != nil {
		return nil, "", time.Time{}, false
	}
	e, err := protocol.Open(body, sig, author)
	if err != nil {
		return nil, "", time.Time{}, false
	}
	if e.Type != protocol.TypeNotify || e.To == nil || !e.To.Broadcast || e.To.Topic == "" || Family(e.To.Topic) != fam {
		return nil, "", time.Time{}, false
	}
	if _, err := FilterOf(e); err != nil {
		// A filter no receiver can read is refused here, not forwarded.
		return nil, "", time.Time{}, false
	}
	ts, err := e.Time()
	if err != nil {
		return nil, "", time.Time{}, false
	}
	return e, author, ts, true
}
