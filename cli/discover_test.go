package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/dht"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// TestDiscover runs `meshagent discover` against the local API of the last
// of four nodes bootstrapped in a line; two of them offer "translate".
func TestDiscover(t *testing.T) {
	dhtOn := []node.Option{node.WithDHT(true), node.WithDHTOptions(dht.WithReprovideInterval(time.Second))}
	translate := func(desc string) node.Option {
		return node.WithServices(node.Service{
			Capability: protocol.Capability{Name: "translate", Description: desc, Keywords: []string{"language"}},
			Handler:    node.EchoHandler(),
		})
	}
	var nodes []*node.Node
	for i := range 4 {
		opts := append([]node.Option{}, dhtOn...)
		if i > 0 {
			opts = append(opts, node.WithBootstrap(nodes[i-1].Addrs()...))
		}
		switch i {
		case 0:
			opts = append(opts, translate("en-de"))
		case 2:
			opts = append(opts, translate("en-fr"))
		}
		nodes = append(nodes, meshtest.Node(t, 40+i, opts...))
	}
	api := serveAPI(t, nodes[3])

	wait.For(t, 60*time.Second, func() error {
		res := runCLI(t, "", "discover", "translate", "--api", api, "--json", "--timeout", "5s")
		if res.code != ExitOK {
			return fmt.Errorf("exit %d: %s", res.code, res.stderr)
		}
		var sa rpc.ServicesAvailable
		if err := json.Unmarshal([]byte(res.stdout), &sa); err != nil {
			return fmt.Errorf("stdout %q: %v", res.stdout, err)
		}
		if sa.DiscoveredForCapability != "translate" || len(sa.ServicesFound) != 2 {
			return fmt.Errorf("found %+v", sa)
		}
		return nil
	})

	res := runCLI(t, "", "discover", "language", "--keyword", "--api", api, "--timeout", "5s")
	res.wantCode(t, ExitOK)
	for _, want := range []string{nodes[0].AgentID() + " agent-40: translate (en-de)", nodes[2].AgentID() + " agent-42: translate (en-fr)"} {
		if !strings.Contains(res.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, res.stdout)
		}
	}

	res = runCLI(t, "", "discover", "nobody-offers-this", "--api", api, "--timeout", "1s")
	res.wantCode(t, ExitOK)
	res.wantStderr(t, `no agent found offering capability "nobody-offers-this"`)

	res = runCLI(t, "", "discover", "--api", api)
	res.wantCode(t, ExitUsage)
}
