package mailbox_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/p2ptest"
	"github.com/meshagent/meshagent/mailbox"
	"github.com/meshagent/meshagent/sign"
)

// FuzzParseRequest: whatever a peer sends, the request parser neither
// panics nor accepts a request outside the wire limits, a request it
// accepts survives a round trip through encoding/json, and a deposit it
// accepts is opened (verified) without panicking. The corpus starts from
// deposits signed with a test key, a direct message and a forwarded call
// of another capability, so that mutations reach the envelope checks.
func FuzzParseRequest(f *testing.F) {
	h := p2ptest.Host(f)
	seed := make([]byte, 32)
	k, err := sign.KeyFromSeed(seed)
	if err != nil {
		f.Fatal(err)
	}
	to, _ := peer.IDFromPrivateKey(k)
	env := message(f, h, to, "m1")
	forwarded := call(f, h, to, "summarize", "c1", json.RawMessage(`{"text":"hi","type":"summarize"}`))
	if _, _, err := mailbox.Open(forwarded, to); err != nil {
		f.Fatalf("the forwarded call of the corpus does not open: %v", err)
	}
	for _, r := range []mailbox.Request{
		{Op: mailbox.OpDeposit, To: to.String(), Envelope: env},
		{Op: mailbox.OpDeposit, To: to.String(), Envelope: forwarded},
		{Op: mailbox.OpFetch, After: "12", Limit: 10},
		{Op: mailbox.OpAck, IDs: []string{fmt.Sprintf("%s/%s/m1", to, h.ID())}},
		{Op: mailbox.OpDefer, IDs: []string{fmt.Sprintf("%s/%s/m1", to, h.ID())}},
	} {
		b, _ := json.Marshal(r)
		f.Add(b)
	}
	f.Add([]byte(`{"op":"deposit","op":"fetch"}`))
	f.Add([]byte(`{"op":"fetch","limit":1e3}`))
	f.Add([]byte(`{"op":"ack","ids":[""]}`))
	f.Add([]byte(`{"op":"defer","ids":["a"],"limit":1}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := mailbox.ParseRequest(data)
		if err != nil {
			return
		}
		if r.Limit < 0 || r.Limit > mailbox.MaxPage || len(r.IDs) > mailbox.MaxPage || len(r.Envelope) > mailbox.MaxEnvelopeBytes {
			t.Fatalf("accepted out of bounds: %+v", r)
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mailbox.ParseRequest(b); err != nil {
			t.Fatalf("round trip of %q refused: %v", b, err)
		}
		if r.Op == mailbox.OpDeposit {
			if id, err := sign.ParseAgentID(r.To); err == nil {
				_, _, _ = mailbox.Open(r.Envelope, id)
			}
		}
	})
}
