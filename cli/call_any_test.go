package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// TestCallAny drives `meshagent call --any` through a node's local API
// to two providers of one capability.
func TestCallAny(t *testing.T) {
	n := meshtest.Node(t, 1)
	providers := map[string]bool{}
	for i := range 2 {
		var p *node.Node
		who := handler(func(context.Context, *node.Call) (json.RawMessage, error) {
			return json.RawMessage(fmt.Sprintf(`{"by":%q}`, p.AgentID())), nil
		})
		p = meshtest.Node(t, 2+i, node.WithServices(node.Service{Capability: protocol.Capability{Name: "who"}, Handler: who}))
		meshtest.Connect(t, n, p)
		providers[p.AgentID()] = true
	}
	api := serveAPI(t, n)

	t.Run("for people", func(t *testing.T) {
		res := runCLI(t, "", "call", "--any", "who", "--api", api)
		res.wantCode(t, ExitOK)
		var out struct{ By string }
		if err := json.Unmarshal([]byte(res.stdout), &out); err != nil || !providers[out.By] {
			t.Fatalf("stdout %q (%v)", res.stdout, err)
		}
		res.wantStderr(t, "answered by "+out.By)
	})
	t.Run("as JSON", func(t *testing.T) {
		res := runCLI(t, "", "call", "who", "--any", "--api", api, "--json")
		res.wantCode(t, ExitOK)
		var out struct {
			AgentID string
			Status  protocol.Status
			Result  struct{ By string }
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(res.stdout)), &out); err != nil ||
			out.Status != protocol.StatusSuccess || !providers[out.AgentID] || out.Result.By != out.AgentID {
			t.Fatalf("stdout %q (%v)", res.stdout, err)
		}
	})
	t.Run("nobody offers it", func(t *testing.T) {
		res := runCLI(t, "", "call", "--any", "nobody", "--api", api)
		res.wantCode(t, ExitCodeFor(protocol.CodeCapabilityNotSupported))
		res.wantStderr(t, "CAPABILITY_NOT_SUPPORTED", "no agent known to this node offers capability nobody")
	})
	t.Run("with an agent id", func(t *testing.T) {
		res := runCLI(t, "", "call", "--any", n.AgentID(), "who", "--api", api)
		res.wantCode(t, ExitUsage)
		res.wantStderr(t, "call --any needs CAPABILITY alone")
	})
}
