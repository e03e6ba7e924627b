// Command channel-bridge runs seed 001's channel-bridge flow on the
// meshagent bus: a chat bridge, a default handler that spawns one agent per
// chat, and the agents, each a separate bus.Client of the bus. Without
// flags the bus is an in-process relay; -bus URL uses a running one. See
// README.md.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/daemon"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// script interleaves two chats: each agent keeps its own chat's state.
var script = []struct{ chat, text string }{
	{"1001", "hi"}, {"2002", "hello there"}, {"1001", "how are you?"}, {"2002", "bye"}, {"1001", "thanks"},
}

func main() {
	busURL := flag.String("bus", "", "`URL` of a running bus (meshagent relay --ws ADDR); empty: start one in this process")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	run := run
	if *busURL != "" {
		run = func(ctx context.Context, out io.Writer) error { return runOn(ctx, out, *busURL) }
	}
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "channel-bridge:", err)
		os.Exit(1)
	}
}

// run starts a relay in this process (a node without mesh, a store in a
// temporary directory, the bus on loopback) and runs the flow on it.
func run(ctx context.Context, out io.Writer) error {
	quiet := slog.New(slog.DiscardHandler)
	dir, err := os.MkdirTemp("", "channel-bridge-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := store.Open(filepath.Join(dir, "bus.db"), store.WithLogger(quiet))
	if err != nil {
		return err
	}
	defer st.Close()
	key, err := sign.GenerateKey()
	if err != nil {
		return err
	}
	n, err := node.New(node.WithIdentity(key), node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")),
		node.WithMDNS(false), node.WithDHT(false), node.WithTopics(false), node.WithPresence(node.Presence{}), node.WithLogger(quiet))
	if err != nil {
		return err
	}
	defer n.Close()
	// A short retry backoff keeps each chat's first reply quick.
	srv, err := daemon.NewBusServer(n, quiet, nil, bus.WithTopics(n), bus.WithForwarder(n), bus.WithStore(st), bus.WithRetryBackoff(100*time.Millisecond, time.Minute))
	if err != nil {
		return err
	}
	defer srv.Close()
	if err := srv.Start("127.0.0.1:0"); err != nil {
		return err
	}
	fmt.Fprintln(out, "bus: in-process relay at", srv.URL())
	return runOn(ctx, out, srv.URL())
}

// connect connects to the bus as clientID and subscribes to topic (as
// its default handler if dflt), its deliveries answered by handle.
func connect(ctx context.Context, url, clientID, topic string, dflt bool, handle bus.ProcessFunc) (*bus.Client, error) {
	c, err := bus.Dial(ctx, url, handle, rpc.WithClientID(clientID))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", clientID, err)
	}
	if err := c.Subscribe(ctx, bus.SubscribeParams{Topic: topic, DefaultHandler: dflt}); err != nil {
		c.Close()
		return nil, fmt.Errorf("%s: %w", clientID, err)
	}
	return c, nil
}

// runOn runs the bridge, the default handler and its agents as clients of
// the bus at url, and feeds the script through the bridge.
func runOn(ctx context.Context, out io.Writer, url string) error {
	// The bridge: a real one would call the Bot API with each reply.
	replies := make(chan bus.ProcessParams, len(script))
	bridge, err := connect(ctx, url, "telegram-bridge", "outbound:*", false, func(_ context.Context, _ *bus.Client, p bus.ProcessParams) (bus.ProcessResult, error) {
		replies <- p // one reply per message of the script
		return bus.ProcessResult{Processed: true}, nil
	})
	if err != nil {
		return err
	}
	defer bridge.Close()
	fmt.Fprintln(out, "bridge: telegram-bridge subscribed to outbound:*")

	// The default handler: on a chat no agent subscribes to, it spawns one
	// and has the bus retry, which routes the message to the agent.
	var mu sync.Mutex
	agents := map[string]*bus.Client{}
	counts := map[string]int{} // messages handled per chat: each agent's state
	defer func() {
		for _, a := range agents {
			a.Close()
		}
	}()
	spawner, err := connect(ctx, url, "default-handler", "tg:*", true, func(ctx context.Context, _ *bus.Client, p bus.ProcessParams) (bus.ProcessResult, error) {
		chat := strings.TrimPrefix(p.Topic, "tg:")
		mu.Lock()
		defer mu.Unlock()
		if agents[chat] != nil { // it subscribed after the bus routed this message
			return bus.ProcessResult{ShouldRetry: true, Message: "agent already running"}, nil
		}
		agent, err := connect(ctx, url, "agent-tg-"+chat, p.Topic, false, func(ctx context.Context, agent *bus.Client, p bus.ProcessParams) (bus.ProcessResult, error) {
			var m struct{ Text string }
			_ = json.Unmarshal(p.Payload, &m)
			mu.Lock()
			counts[chat]++
			text := fmt.Sprintf("you said %q (message %d in this chat)", m.Text, counts[chat])
			mu.Unlock()
			res, err := agent.Send(ctx, "outbound:"+chat, map[string]any{"type": "plaintext_message", "text": text, "chat_id": chat})
			if err != nil || !res.Success {
				return bus.ProcessResult{ShouldRetry: true, Message: fmt.Sprintf("reply not delivered: %v", err)}, nil
			}
			return bus.ProcessResult{Processed: true}, nil
		})
		if err != nil {
			return bus.ProcessResult{ShouldRetry: true, Message: err.Error()}, nil
		}
		agents[chat] = agent
		return bus.ProcessResult{ShouldRetry: true, Message: "spawned agent-tg-" + chat}, nil
	})
	if err != nil {
		return err
	}
	defer spawner.Close()
	fmt.Fprintln(out, "spawner: default-handler is the default handler for tg:*")

	for i, m := range script {
		fmt.Fprintf(out, "chat %s -> %s\n", m.chat, m.text)
		res, err := bridge.Send(ctx, "tg:"+m.chat, map[string]any{"type": "telegram_message", "text": m.text,
			"chat_id": m.chat, "message_id": i + 1, "timestamp": time.Now().UTC().Format(time.RFC3339)})
		if err != nil {
			return err
		}
		for _, a := range res.Acks {
			state := fmt.Sprintf("processed: %t", a.Processed)
			if a.Retrying {
				state = "retrying: " + a.Message
			}
			fmt.Fprintf(out, "bus: tg:%s acked by %s (%s)\n", m.chat, a.ClientID, state)
		}
		select {
		case r := <-replies:
			var reply struct{ Text string }
			_ = json.Unmarshal(r.Payload, &reply)
			fmt.Fprintf(out, "chat %s <- %s\n", strings.TrimPrefix(r.Topic, "outbound:"), reply.Text)
		case <-ctx.Done():
			return fmt.Errorf("no reply to %q in chat %s: %w", m.text, m.chat, ctx.Err())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	fmt.Fprintf(out, "spawned %d agents; chat 1001 had %d messages, chat 2002 %d\n", len(agents), counts["1001"], counts["2002"])
	return nil
}
