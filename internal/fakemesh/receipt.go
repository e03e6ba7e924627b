package fakemesh

import (
	"crypto/sha256"
	"encoding/json"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// PeerReceipt is resp as PeerID would sign it for SelfID: the receipt a
// node hands over for a call answered by PeerID. It panics if signing
// fails, which only a broken build can make it do.
func PeerReceipt(resp *protocol.Response) json.RawMessage {
	seed := sha256.Sum256([]byte("relay-test-peer"))
	k, err := sign.KeyFromSeed(seed[:])
	must(err)
	s, err := sign.NewSigner(k)
	must(err)
	e, err := protocol.NewEnvelope(protocol.TypeResponse, &protocol.Recipient{AgentID: SelfID}, resp)
	must(err)
	body, sig, err := protocol.Seal(s, e)
	must(err)
	doc, err := protocol.SignedJSON(body, sig)
	must(err)
	return doc
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
