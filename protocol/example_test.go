package protocol_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// signer returns the identity whose Ed25519 seed is 32 bytes of b. Real
// agents load theirs with sign.LoadOrCreateKey.
func signer(b byte) *sign.Signer {
	k, err := sign.KeyFromSeed(bytes.Repeat([]byte{b}, 32))
	if err != nil {
		panic(err)
	}
	s, err := sign.NewSigner(k)
	if err != nil {
		panic(err)
	}
	return s
}

func ExampleSeal() {
	alice, bob := signer(1), signer(2)

	e, err := protocol.NewEnvelope(protocol.TypeRequest, &protocol.Recipient{AgentID: bob.ID().String()}, protocol.Request{
		Action:        "translate",
		CorrelationID: "req-1",
		Params:        json.RawMessage(`{"text":"hello","to":"de"}`),
	})
	if err != nil {
		panic(err)
	}
	// New picks a random id and the current time; fix them so that this
	// example prints the same bytes every time.
	e.ID = "00000000-0000-4000-8000-000000000001"
	e.Timestamp = "2026-02-01T15:08:00.000Z"

	body, sig, err := protocol.Seal(alice, e)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%s\n", body)
	fmt.Println(sign.EncodeSignature(sig))
	// Output:
	// {"from":{"agentId":"12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5"},"id":"00000000-0000-4000-8000-000000000001","payload":{"action":"translate","correlationId":"req-1","params":{"text":"hello","to":"de"}},"protocol":"agentprotocol/0.1","timestamp":"2026-02-01T15:08:00.000Z","to":{"agentId":"12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq","broadcast":false},"type":"request"}
	// bwUnS2XENF2Qin0rTX+Oih8YiCV93J7C7M1nh6uWWWNi4jZ+0LNjZXts3UTkCyIn6pFnYQg+cgu50wAvl3BODg==
}

func ExampleOpen() {
	alice, bob := signer(1), signer(2)

	// The sender seals a request and writes it as one frame.
	e, err := protocol.NewEnvelope(protocol.TypeRequest, &protocol.Recipient{AgentID: bob.ID().String()}, protocol.Request{
		Action:        "translate",
		CorrelationID: "req-1",
		Params:        json.RawMessage(`{"text":"hello","to":"de"}`),
	})
	if err != nil {
		panic(err)
	}
	body, sig, err := protocol.Seal(alice, e)
	if err != nil {
		panic(err)
	}
	var stream bytes.Buffer
	stream.Write(protocol.AppendSignedFrame(nil, sig, body))

	// The receiver reads the frame and verifies it against the remote
	// peer its libp2p connection authenticated, before parsing anything.
	remote := alice.ID()
	frames := protocol.NewFrameReader(&stream, protocol.DefaultMaxFrameSize)
	frame, err := frames.Next()
	if err != nil {
		panic(err)
	}
	sig, env, err := protocol.SplitSigned(frame)
	if err != nil {
		panic(err)
	}
	got, err := protocol.Open(env, sig, remote)
	if err != nil {
		panic(err)
	}
	req, err := protocol.DecodeRequest(got)
	if err != nil {
		panic(err)
	}
	fmt.Println(got.Type, req.Action, req.CorrelationID, string(req.Params))

	// A frame that was tampered with in transit is refused with the code
	// a reply would carry.
	env[len(env)-3] ^= 0x20
	_, err = protocol.Open(env, sig, remote)
	fmt.Println(protocol.CodeOf(err))

	_, err = frames.Next()
	fmt.Println(err == io.EOF)
	// Output:
	// request translate req-1 {"text":"hello","to":"de"}
	// INVALID_SIGNATURE
	// true
}
