package localapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/meshagent/meshagent/localapi"
	"github.com/meshagent/meshagent/protocol"
)

// FuzzAgentProtocol drives the whole seed 002 path with arbitrary input,
// raw and signed by a test key so that it gets past the signature check
// to the decoding behind it: no panic, and every answer is either the
// node's signed envelope or the plain error, with a status code that says
// which.
func FuzzAgentProtocol(f *testing.F) {
	mesh := &fakeMesh{signer: newSigner(f)}
	client := newSigner(f)
	ap := localapi.NewAgentProtocol(mesh, nil)
	f.Add([]byte(`{"action":"echo","correlationId":"c","params":{"a":1}}`), "request", true)
	f.Add([]byte(`{"version":"0.1","features":[]}`), "hello", true)
	f.Add([]byte(`{"action":7,"correlationId":[],"params":"x","timeout":"1"}`), "request", true)
	f.Add([]byte(`{"protocol":"agentprotocol/0.1"}`), "", false)
	f.Fuzz(func(t *testing.T, payload []byte, typ string, signIt bool) {
		doc := payload
		if signIt && json.Valid(payload) {
			env, err := protocol.NewEnvelope(protocol.MessageType(typ), &protocol.Recipient{AgentID: mesh.AgentID()}, json.RawMessage(payload))
			if err != nil {
				return
			}
			env.From.AgentID = client.IDString()
			body, err := protocol.MarshalCanonical(env)
			if err != nil {
				return
			}
			if doc, err = protocol.SignedJSON(body, client.Sign(body)); err != nil {
				return
			}
		}
		answer, status := ap.Handle(context.Background(), doc, nil)
		if _, _, err := protocol.OpenJSON(answer); err != nil {
			var plain protocol.Error
			if json.Unmarshal(answer, &plain) != nil || plain.Code == "" {
				t.Fatalf("status %d answer %q is neither a signed envelope nor a plain error", status, answer)
			}
		}
		if status != http.StatusOK && status < 400 {
			t.Fatalf("status %d", status)
		}
	})
}
