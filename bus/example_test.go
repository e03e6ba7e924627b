package bus_test

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/rpc"
)

// A Go bus client: an agent subscribed to inbound:* answers each delivery
// by sending a reply on outbound:* through its own Client, and a sender
// reads the bus's acks.
func ExampleClient() {
	quiet := slog.New(slog.DiscardHandler)
	mesh := fakemesh.New() // a running node in a real program
	srv, err := rpc.New(mesh, rpc.WithLogger(quiet))
	if err != nil {
		panic(err)
	}
	b, err := bus.New(srv, mesh, bus.WithLogger(quiet))
	if err != nil {
		panic(err)
	}
	defer b.Close()
	defer srv.Close()
	if err := srv.Start("127.0.0.1:0"); err != nil {
		panic(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	replies := make(chan string, 1)
	listener, err := bus.Dial(ctx, srv.URL(), func(_ context.Context, _ *bus.Client, p bus.ProcessParams) (bus.ProcessResult, error) {
		replies <- p.Topic + " " + string(p.Payload)
		return bus.ProcessResult{Processed: true}, nil
	}, rpc.WithClientID("listener"))
	if err != nil {
		panic(err)
	}
	defer listener.Close()
	agent, err := bus.Dial(ctx, srv.URL(), func(ctx context.Context, c *bus.Client, p bus.ProcessParams) (bus.ProcessResult, error) {
		_, err := c.Send(ctx, "outbound:1", map[string]string{"type": "plaintext_message", "text": "hello back"})
		return bus.ProcessResult{Processed: err == nil}, err
	}, rpc.WithClientID("agent"))
	if err != nil {
		panic(err)
	}
	defer agent.Close()
	if err := listener.Subscribe(ctx, bus.SubscribeParams{Topic: "outbound:*"}); err != nil {
		panic(err)
	}
	if err := agent.Subscribe(ctx, bus.SubscribeParams{Topic: "inbound:*"}); err != nil {
		panic(err)
	}

	sender, err := bus.Dial(ctx, srv.URL(), nil) // sends only
	if err != nil {
		panic(err)
	}
	defer sender.Close()
	res, err := sender.Send(ctx, "inbound:1", map[string]string{"type": "plaintext_message", "text": "hello"})
	if err != nil {
		panic(err)
	}
	fmt.Println("acked by", res.Acks[0].ClientID, "processed:", res.Acks[0].Processed)
	fmt.Println("listener got", <-replies)
	// Output:
	// acked by agent processed: true
	// listener got outbound:1 {"text":"hello back","type":"plaintext_message"}
}
