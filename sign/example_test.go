package sign_test

import (
	"bytes"
	"fmt"
	"log"

	"github.com/meshagent/meshagent/sign"
)

// A message is signed over its RFC 8785 canonical form; the embedded form
// carries the signature as a "signature" member. Ed25519 is deterministic,
// so a fixed seed gives a fixed signature.
func ExampleSigner() {
	key, err := sign.KeyFromSeed(bytes.Repeat([]byte{1}, 32)) // use sign.LoadOrCreateKey in real code
	if err != nil {
		log.Fatal(err)
	}
	signer, err := sign.NewSigner(key)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("agent id:  ", signer.ID())
	fmt.Println("public key:", signer.PublicKeyBase64())

	signed, err := signer.SignJSON([]byte(`{"type": "hello", "payload": {"version": "0.1"}}`))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(signed))

	// The receiver splits the signature from the bytes that were signed
	// and verifies them with the key inlined in the sender's agent id.
	body, sig, err := sign.Detach(signed)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(body))
	fmt.Println("verify:", sign.Verify(signer.ID(), body, sig))
	fmt.Println("tampered:", sign.Verify(signer.ID(), bytes.Replace(body, []byte("0.1"), []byte("0.2"), 1), sig))
	// Output:
	// agent id:   12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5
	// public key: iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w=
	// {"payload":{"version":"0.1"},"signature":"2kg7O/mL5SzwXybyM6GAMTw9DD6SQrwj6D96a6zkVXocF48f2IpZ7D9zxYNcjfmPqf0MRfqpr7yea44Y7AvQCg==","type":"hello"}
	// {"payload":{"version":"0.1"},"type":"hello"}
	// verify: <nil>
	// tampered: sign: invalid signature
}

// Seed 002 writes an agent id as a base64 Ed25519 public key; meshagent
// writes the libp2p peer ID. Both parse to the same peer ID.
func ExampleParseAgentID() {
	for _, s := range []string{
		"12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5",
		"iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w=",
		"iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w",    // unpadded
		"QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N", // an RSA peer: no inline key
	} {
		id, err := sign.ParseAgentID(s)
		if err != nil {
			fmt.Println("error:", err)
			continue
		}
		b64, _ := sign.PublicKeyBase64(id)
		fmt.Println(id, b64)
	}
	// Output:
	// 12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5 iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w=
	// 12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5 iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w=
	// 12D3KooWK99VoVxNE7XzyBwXEzW7xhK7Gpv85r9F3V3fyKSUKPH5 iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w=
	// error: sign: invalid agent id: public key is not embedded in peer ID
}
