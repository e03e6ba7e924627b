package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// Two agents on loopback: one offers "echo", the other bootstraps to it and
// calls it once it has its hello.
func ExampleNode_Call() {
	quiet := node.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	loopback := node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0"))

	k1, _ := sign.GenerateKey()
	provider, err := node.New(node.WithIdentity(k1), loopback, quiet, node.WithMDNS(false),
		node.WithServices(node.Service{
			Capability: protocol.Capability{Name: "echo", Description: "returns its params"},
			Handler:    node.EchoHandler(),
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer provider.Close()

	k2, _ := sign.GenerateKey()
	caller, err := node.New(node.WithIdentity(k2), loopback, quiet, node.WithMDNS(false),
		node.WithBootstrap(provider.Addrs()...))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer caller.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := caller.WaitHello(ctx, provider.ID()); err != nil {
		fmt.Println(err)
		return
	}
	resp, err := caller.Call(ctx, protocol.CallRequest{
		To: provider.AgentID(), Action: "echo", Params: json.RawMessage(`{"text":"hi"}`),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(resp.Status, string(resp.Result))
	// Output: success {"text":"hi"}
}

// A subscriber to "outbound:*" on one agent receives what another agent
// publishes to "outbound:42". Publish waits (up to the publish wait) until
// the topic has a subscriber, so the first message is not lost.
func ExampleNode_Publish() {
	quiet := node.WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	loopback := node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0"))

	k1, _ := sign.GenerateKey()
	listener, err := node.New(node.WithIdentity(k1), loopback, quiet, node.WithMDNS(false))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer listener.Close()
	received := make(chan protocol.TopicMessage, 1)
	cancelSub, err := listener.Subscribe("outbound:*", func(m protocol.TopicMessage) { received <- m })
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cancelSub()

	k2, _ := sign.GenerateKey()
	speaker, err := node.New(node.WithIdentity(k2), loopback, quiet, node.WithMDNS(false),
		node.WithBootstrap(listener.Addrs()...))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer speaker.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	peers, err := speaker.Publish(ctx, "outbound:42", json.RawMessage(`{"text":"hi"}`), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	m := <-received
	fmt.Println(peers, m.Topic, string(m.Payload), m.From == speaker.AgentID())
	// Output: 1 outbound:42 {"text":"hi"} true
}
