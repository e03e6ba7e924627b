package node_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/dht"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// TestDiscover runs six nodes bootstrapped in a line (each knows only the
// previous one); two offer "translate", one of them only as a keyword.
// The last node discovers both, with the capability objects they signed.
func TestDiscover(t *testing.T) {
	const n = 6
	dhtOpts := node.WithDHTOptions(dht.WithProviderTTL(time.Minute), dht.WithReprovideInterval(time.Second))
	translate := node.Service{Capability: protocol.Capability{Name: "translate", Description: "en-de"}, Handler: node.EchoHandler()}
	byKeyword := node.Service{Capability: protocol.Capability{Name: "myagent:translation/en-fr", Keywords: []string{"translate"}}, Handler: node.EchoHandler()}
	var nodes []*node.Node
	for i := range n {
		opts := []node.Option{node.WithDHT(true), dhtOpts}
		if i > 0 {
			opts = append(opts, node.WithBootstrap(nodes[i-1].Addrs()...))
		}
		switch i {
		case 1:
			opts = append(opts, node.WithServices(translate))
		case 2:
			opts = append(opts, node.WithServices(byKeyword))
		}
		nodes = append(nodes, meshtest.Node(t, 10+i, opts...))
	}
	last := nodes[n-1]
	want := []string{nodes[1].AgentID() + "=translate", nodes[2].AgentID() + "=myagent:translation/en-fr"}
	sort.Strings(want)
	wait.For(t, 60*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var got []string
		for _, kw := range []bool{false, true} {
			ch, err := last.Discover(ctx, "translate", kw)
			if err != nil {
				return err
			}
			for pi := range ch {
				var names []string
				for _, c := range pi.Capabilities {
					names = append(names, c.Name)
				}
				got = append(got, pi.AgentID+"="+strings.Join(names, ","))
			}
		}
		sort.Strings(got)
		// By name finds node 1; by keyword finds both (a capability's
		// name is not one of its keywords, so node 1 appears only once).
		if strings.Join(dedup(got), " ") != strings.Join(want, " ") {
			return fmt.Errorf("discovered %v, want %v", got, want)
		}
		return nil
	})
}

func dedup(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

func TestDiscoverWithoutDHT(t *testing.T) {
	a := meshtest.Node(t, 1)
	if _, err := a.Discover(context.Background(), "x", false); err != node.ErrNoDirectory {
		t.Fatalf("got %v, want ErrNoDirectory", err)
	}
}
