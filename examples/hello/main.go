// Command hello runs two agents in one process on loopback: a provider that
// offers a "greet" capability with an input schema and an ACL, and a caller
// that finds it through the signed hello exchange and calls it, printing
// each step.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "hello:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	loopback := ma.StringCast("/ip4/127.0.0.1/tcp/0")

	callerKey, err := sign.GenerateKey()
	if err != nil {
		return err
	}
	callerID, _ := peer.IDFromPrivateKey(callerKey)

	greet := node.Service{
		Capability: protocol.Capability{
			Name:                   "example:greet",
			Description:            "greets someone by name",
			InputSchema:            json.RawMessage(`{"type":"object","required":["name"],"properties":{"name":{"type":"string","minLength":1}}}`),
			AuthorizedRequesterIDs: []string{callerID.String()},
		},
		Handler: node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
			var p struct{ Name string }
			if err := json.Unmarshal(c.Request.Params, &p); err != nil {
				return nil, err
			}
			_ = c.Progress(json.RawMessage(`{"thinking":true}`))
			return json.Marshal(map[string]string{"greeting": "hello, " + p.Name, "caller": c.From.String()})
		}),
	}
	providerKey, err := sign.GenerateKey()
	if err != nil {
		return err
	}
	provider, err := node.New(node.WithIdentity(providerKey), node.WithName("provider"), node.WithListenAddrs(loopback),
		node.WithMDNS(false), node.WithLogger(quiet), node.WithServices(greet))
	if err != nil {
		return err
	}
	defer provider.Close()
	caller, err := node.New(node.WithIdentity(callerKey), node.WithName("caller"), node.WithListenAddrs(loopback),
		node.WithMDNS(false), node.WithLogger(quiet), node.WithBootstrap(provider.Addrs()...))
	if err != nil {
		return err
	}
	defer caller.Close()
	fmt.Fprintln(out, "provider:", provider.AgentID())
	fmt.Fprintln(out, "caller:  ", caller.AgentID())

	// Wait for the provider's signed hello, which carries its capabilities.
	caps, err := caller.WaitHello(ctx, provider.ID())
	if err != nil {
		return fmt.Errorf("no hello from the provider: %w", err)
	}
	for _, c := range caps {
		fmt.Fprintf(out, "hello: provider offers %s (%s)\n", c.Name, c.Description)
	}

	resp, err := caller.Call(ctx, protocol.CallRequest{
		To: provider.AgentID(), Action: "example:greet", Params: json.RawMessage(`{"name":"Ada"}`),
		Progress: func(r *protocol.Response) { fmt.Fprintf(out, "progress: %s\n", r.Result) },
	})
	if err != nil {
		return err
	}
	var result struct{ Greeting string }
	_ = json.Unmarshal(resp.Result, &result)
	fmt.Fprintf(out, "response: %s\n", result.Greeting)

	_, err = caller.Call(ctx, protocol.CallRequest{To: provider.AgentID(), Action: "example:greet", Params: json.RawMessage(`{}`)})
	fmt.Fprintf(out, "bad params: %s\n", protocol.CodeOf(err))
	_, err = caller.Call(ctx, protocol.CallRequest{To: provider.AgentID(), Action: "example:translate"})
	fmt.Fprintf(out, "unknown capability: %s\n", protocol.CodeOf(err))
	return nil
}
