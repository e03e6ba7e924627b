package relay_test

import (
	"testing"

	"github.com/meshagent/meshagent/relay"
)

// TestMeshCallVouchesForCredential: mesh.call from a public client
// authenticated by a credential vouches for it ("bus:<name>"); from the
// local API it does not (the node calls for itself).
func TestMeshCallVouchesForCredential(t *testing.T) {
	l := serveListeners(t, testTokens)
	for _, tc := range []struct{ url, want string }{
		{withToken(l.public, meshToken), "bus:caller"},
		{l.local, ""},
	} {
		c := dialClient(t, tc.url)
		var res struct {
			Result struct {
				OnBehalfOf string `json:"onBehalfOf"`
			} `json:"result"`
		}
		if err := c.Call(ctxT(t), relay.MethodMeshCall, map[string]any{"agentId": peerID, "capability": "whoami"}, &res); err != nil {
			t.Fatal(err)
		}
		if res.Result.OnBehalfOf != tc.want {
			t.Errorf("%s: the mesh saw onBehalfOf %q, want %q", tc.url, res.Result.OnBehalfOf, tc.want)
		}
	}
}
