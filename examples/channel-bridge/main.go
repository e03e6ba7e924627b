// Command channel-bridge runs seed 001's channel-bridge flow on the
// meshagent bus: a chat bridge publishes inbound chat messages on
// tg:<chat_id>, a default handler spawns one conversation agent per chat
// when a chat's first message finds no subscriber, and each agent
// subscribes to its chat, keeps the conversation's state and replies on
// outbound:<chat_id>, which the bridge subscribes to and "sends to the
// chat" (prints).
//
// Every participant is a separate WebSocket JSON-RPC client of the bus
// (rpc.Client answering the bus's processMessage), as it would be in
// separate processes. Without flags the bus is an in-process relay; with
// -bus URL the same clients use a running relay (meshagent relay).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

// Topic families of the flow (seed 001: "tg:{chat_id}" carries a Telegram
// chat's messages, "outbound:{chat_id}" the replies to deliver to it).
const (
	inboundPrefix  = "tg:"
	outboundPrefix = "outbound:"
)

// Client ids on the bus. An agent's id is derived from its chat so that
// the output can be asserted; seed 001 only asks for a unique id.
const (
	bridgeID  = "telegram-bridge"
	spawnerID = "default-handler"
)

// replyTimeout bounds the wait for the reply to one chat message.
const replyTimeout = 15 * time.Second

// chatMessage is one scripted message a user sends in a chat.
type chatMessage struct {
	Chat, From, Text string
}

// script interleaves two chats, so that each agent must keep its own
// chat's state.
var script = []chatMessage{
	{"1001", "ada", "hi"},
	{"2002", "bob", "hello there"},
	{"1001", "ada", "how are you?"},
	{"2002", "bob", "bye"},
	{"1001", "ada", "thanks"},
}

func main() {
	busURL := flag.String("bus", "", "`URL` of a running bus (meshagent relay --ws ADDR); empty: start one in this process")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var err error
	if *busURL == "" {
		err = run(ctx, os.Stdout)
	} else {
		err = runOn(ctx, os.Stdout, *busURL)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "channel-bridge:", err)
		os.Exit(1)
	}
}

// run starts a relay in this process (a node, a store in a temporary
// directory, the bus on a free loopback port) and runs the flow on it.
func run(ctx context.Context, out io.Writer) (err error) {
	quiet := slog.New(slog.DiscardHandler)
	dir, err := os.MkdirTemp("", "channel-bridge-")
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	st, err := store.Open(filepath.Join(dir, "bus.db"), store.WithLogger(quiet))
	if err != nil {
		return fmt.Errorf("open store: %w", err)
	}
	defer func() { err = errors.Join(err, st.Close()) }()

	key, err := sign.GenerateKey()
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	// The relay's node needs no mesh here: no peers, so no DHT, topics or
	// presence heartbeats; the bus is what the example is about.
	n, err := node.New(node.WithIdentity(key), node.WithName("relay"),
		node.WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")), node.WithMDNS(false),
		node.WithDHT(false), node.WithTopics(false), node.WithPresence(node.Presence{}), node.WithLogger(quiet))
	if err != nil {
		return fmt.Errorf("start node: %w", err)
	}
	defer func() { err = errors.Join(err, n.Close()) }()

	// The default handler answers should_retry once it has spawned an
	// agent; the bus retries from its outbox after RetryBackoff. A short
	// backoff keeps the first reply of a chat quick.
	srv, err := rpc.New(n, rpc.WithLogger(quiet))
	if err != nil {
		return fmt.Errorf("bus: %w", err)
	}
	b, err := bus.New(srv, n, bus.WithLogger(quiet), bus.WithStore(st), bus.WithRetryBackoff(100*time.Millisecond, time.Minute))
	if err != nil {
		return errors.Join(fmt.Errorf("bus: %w", err), srv.Close())
	}
	// The server first, so that no request reaches a closed bus.
	defer func() { err = errors.Join(err, srv.Close(), b.Close()) }()
	if err := srv.Start("127.0.0.1:0"); err != nil {
		return fmt.Errorf("bus: %w", err)
	}
	fmt.Fprintln(out, "bus: in-process relay at", srv.URL())
	return runOn(ctx, out, srv.URL())
}

// runOn runs the bridge, the default handler and the agents it spawns as
// clients of the bus at busURL, feeds the script through the bridge, and
// prints each step.
func runOn(ctx context.Context, out io.Writer, busURL string) (err error) {
	w := &syncWriter{w: out}

	br, err := startBridge(ctx, busURL)
	if err != nil {
		return err
	}
	defer br.client.Close()
	fmt.Fprintf(w, "bridge: %s subscribed to %s*\n", bridgeID, outboundPrefix)

	sp, err := startSpawner(ctx, busURL, w)
	if err != nil {
		return err
	}
	defer sp.close()
	fmt.Fprintf(w, "spawner: %s is the default handler for %s*\n", spawnerID, inboundPrefix)

	for i, m := range script {
		fmt.Fprintf(w, "chat %s -> %s\n", m.Chat, m.Text)
		res, err := br.send(ctx, m, i+1)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "bus: %s%s acked by %s\n", inboundPrefix, m.Chat, describeAcks(res.Acks))
		r, err := br.waitReply(ctx)
		if err != nil {
			return fmt.Errorf("chat %s, message %q: %w", m.Chat, m.Text, err)
		}
		if r.Chat != m.Chat {
			return fmt.Errorf("a reply for chat %s came while chat %s waited: %q", r.Chat, m.Chat, r.Text)
		}
		fmt.Fprintf(w, "chat %s <- %s\n", r.Chat, r.Text)
	}

	taken, agents := sp.stats()
	fmt.Fprintf(w, "spawner: took %d messages, spawned %d agents\n", taken, len(agents))
	for _, a := range agents {
		fmt.Fprintf(w, "%s: handled %d messages of chat %s\n", a.id, a.handled(), a.chat)
	}
	return nil
}

// dialBus connects to the bus and initializes as clientID; handle serves
// the bus's processMessage calls.
func dialBus(ctx context.Context, busURL, clientID string, handle func(context.Context, bus.ProcessParams) bus.ProcessResult) (*rpc.Client, error) {
	c, err := rpc.Dial(ctx, busURL, rpc.WithClientID(clientID),
		rpc.WithClientInfo(rpc.ClientInfo{Name: "channel-bridge-example", Version: "0.1.0"}), rpc.WithRequestHandler(func(ctx context.Context, method string, params json.RawMessage) (any, error) {
			if method != bus.MethodProcessMessage {
				return nil, rpc.Errorf(rpc.CodeMethodNotFound, "method not found: %s", method)
			}
			var p bus.ProcessParams
			if err := json.Unmarshal(params, &p); err != nil {
				return nil, rpc.Errorf(rpc.CodeInvalidParams, "invalid params: %v", err)
			}
			return handle(ctx, p), nil
		}))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", clientID, err)
	}
	return c, nil
}

// subscribe subscribes c to topic, as the default handler if dflt.
func subscribe(ctx context.Context, c *rpc.Client, topic string, dflt bool) error {
	params := map[string]any{"topic": topic}
	if dflt {
		params["defaultHandler"] = true
	}
	if err := c.Call(ctx, bus.MethodSubscribe, params, nil); err != nil {
		return fmt.Errorf("subscribe %s: %w", topic, err)
	}
	return nil
}

// sendMessage publishes payload on topic and returns the bus's acks.
func sendMessage(ctx context.Context, c *rpc.Client, topic string, payload any) (bus.SendResult, error) {
	var res bus.SendResult
	err := c.Call(ctx, bus.MethodSendMessage, map[string]any{"topic": topic, "payload": payload}, &res)
	if err != nil {
		return res, fmt.Errorf("sendMessage %s: %w", topic, err)
	}
	return res, nil
}

// describeAcks renders a sendMessage result's acks, one per subscriber:
// "agent-tg-1001 (processed)".
func describeAcks(acks []bus.Ack) string {
	if len(acks) == 0 {
		return "nobody"
	}
	parts := make([]string, 0, len(acks))
	for _, a := range acks {
		state := "not processed"
		switch {
		case a.Retrying:
			state = "retrying: " + a.Message
		case a.Processed:
			state = "processed"
		}
		parts = append(parts, fmt.Sprintf("%s (%s)", a.ClientID, state))
	}
	return strings.Join(parts, ", ")
}

// reply is an outbound message the bridge received for a chat.
type reply struct {
	Chat, Text string
}

// bridge stands in for the Telegram bridge: it sends what users write to
// tg:<chat_id> and receives replies on outbound:* (a real bridge would
// call the Bot API's sendMessage with them).
type bridge struct {
	client  *rpc.Client
	replies chan reply
}

func startBridge(ctx context.Context, busURL string) (*bridge, error) {
	b := &bridge{replies: make(chan reply, 64)}
	c, err := dialBus(ctx, busURL, bridgeID, b.processMessage)
	if err != nil {
		return nil, err
	}
	if err := subscribe(ctx, c, outboundPrefix+"*", false); err != nil {
		c.Close()
		return nil, err
	}
	b.client = c
	return b, nil
}

// processMessage receives an outbound message: the delivery to the chat.
func (b *bridge) processMessage(_ context.Context, p bus.ProcessParams) bus.ProcessResult {
	var m struct {
		ChatID string `json:"chat_id"`
		Text   string `json:"text"`
	}
	chat, _ := strings.CutPrefix(p.Topic, outboundPrefix)
	if err := json.Unmarshal(p.Payload, &m); err != nil || m.ChatID != chat {
		return bus.ProcessResult{Message: "not a reply for chat " + chat}
	}
	select {
	case b.replies <- reply{Chat: chat, Text: m.Text}:
		return bus.ProcessResult{Processed: true, Message: "sent to chat " + chat}
	default:
		return bus.ProcessResult{ShouldRetry: true, Message: "bridge busy"}
	}
}

// send publishes a user's message as seed 001's telegram_message.
func (b *bridge) send(ctx context.Context, m chatMessage, messageID int) (bus.SendResult, error) {
	return sendMessage(ctx, b.client, inboundPrefix+m.Chat, map[string]any{
		"type":       "telegram_message",
		"text":       m.Text,
		"from":       m.From,
		"chat_id":    m.Chat,
		"message_id": messageID,
		"timestamp":  time.Now().UTC().Format(time.RFC3339),
	})
}

// waitReply waits for the next outbound message.
func (b *bridge) waitReply(ctx context.Context) (reply, error) {
	t := time.NewTimer(replyTimeout)
	defer t.Stop()
	select {
	case r := <-b.replies:
		return r, nil
	case <-t.C:
		return reply{}, fmt.Errorf("no reply within %v", replyTimeout)
	case <-ctx.Done():
		return reply{}, ctx.Err()
	}
}

// spawner is seed 001's default handler agent: it receives the messages
// on tg:* that no agent subscribes to, spawns a conversation agent for
// the chat, and asks the bus to retry, which routes the message afresh,
// to the new agent.
type spawner struct {
	busURL string
	out    io.Writer
	client *rpc.Client

	mu     sync.Mutex
	taken  int
	agents map[string]*chatAgent // by chat id
}

func startSpawner(ctx context.Context, busURL string, out io.Writer) (*spawner, error) {
	s := &spawner{busURL: busURL, out: out, agents: map[string]*chatAgent{}}
	c, err := dialBus(ctx, busURL, spawnerID, s.processMessage)
	if err != nil {
		return nil, err
	}
	if err := subscribe(ctx, c, inboundPrefix+"*", true); err != nil {
		c.Close()
		return nil, err
	}
	s.client = c
	return s, nil
}

func (s *spawner) processMessage(ctx context.Context, p bus.ProcessParams) bus.ProcessResult {
	chat, ok := strings.CutPrefix(p.Topic, inboundPrefix)
	if !ok || chat == "" {
		return bus.ProcessResult{Message: "not a chat topic: " + p.Topic}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taken++
	if _, ok := s.agents[chat]; ok {
		// The agent subscribed after the bus routed this message.
		return bus.ProcessResult{ShouldRetry: true, Message: "agent already running"}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	a, err := spawnAgent(ctx, s.busURL, chat)
	if err != nil {
		slog.Warn("agent not spawned", "chat", chat, "err", err)
		return bus.ProcessResult{ShouldRetry: true, Message: "spawn failed: " + err.Error()}
	}
	s.agents[chat] = a
	fmt.Fprintf(s.out, "spawner: no agent on %s; spawned %s (default topic %s, replies to %s)\n", p.Topic, a.id, a.defaultTopic, a.replyTopic)
	return bus.ProcessResult{ShouldRetry: true, Message: "spawned " + a.id}
}

// stats returns how many messages the spawner took and its agents in
// chat order.
func (s *spawner) stats() (int, []*chatAgent) {
	s.mu.Lock()
	defer s.mu.Unlock()
	agents := make([]*chatAgent, 0, len(s.agents))
	for _, a := range s.agents {
		agents = append(agents, a)
	}
	slices.SortFunc(agents, func(a, b *chatAgent) int { return strings.Compare(a.chat, b.chat) })
	return s.taken, agents
}

// close stops the spawner and its agents.
func (s *spawner) close() {
	s.client.Close()
	_, agents := s.stats()
	for _, a := range agents {
		a.client.Close()
	}
}

// chatAgent is a conversation agent for one chat. seed 001 spawns it with
// BUB_AGENT_ID, BUB_DEFAULT_TOPIC (its chat's topic) and BUB_BUS_URL; here
// they are fields.
type chatAgent struct {
	id           string
	chat         string
	defaultTopic string
	replyTopic   string
	client       *rpc.Client
	ready        chan struct{} // closed once client is set

	mu    sync.Mutex
	count int // messages handled: the conversation's state
}

// spawnAgent connects a new agent for chat to the bus and subscribes it
// to the chat's topic; from then on the bus routes the chat to it.
func spawnAgent(ctx context.Context, busURL, chat string) (*chatAgent, error) {
	a := &chatAgent{id: "agent-tg-" + chat, chat: chat, defaultTopic: inboundPrefix + chat,
		replyTopic: outboundPrefix + chat, ready: make(chan struct{})}
	c, err := dialBus(ctx, busURL, a.id, a.processMessage)
	if err != nil {
		return nil, err
	}
	a.client = c
	close(a.ready)
	if err := subscribe(ctx, c, a.defaultTopic, false); err != nil {
		c.Close()
		return nil, err
	}
	return a, nil
}

// processMessage answers a chat message on outbound:<chat_id>, counting
// the messages of the conversation.
func (a *chatAgent) processMessage(ctx context.Context, p bus.ProcessParams) bus.ProcessResult {
	select {
	case <-a.ready:
	case <-ctx.Done():
		return bus.ProcessResult{ShouldRetry: true, Message: "agent closing"}
	}
	var m struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(p.Payload, &m); err != nil || m.Type != "telegram_message" {
		return bus.ProcessResult{Message: "not a telegram_message"}
	}
	// One message at a time, so that the count and the reply order agree.
	a.mu.Lock()
	defer a.mu.Unlock()
	n := a.count + 1
	text := fmt.Sprintf("you said %q (message %d in this chat)", m.Text, n)
	res, err := sendMessage(ctx, a.client, a.replyTopic, map[string]any{
		"type": "plaintext_message", "text": text, "sender": a.id, "chat_id": a.chat,
		"timestamp": time.Now().UTC().Format(time.RFC3339),
	})
	if err != nil || !res.Success {
		return bus.ProcessResult{ShouldRetry: true, Message: fmt.Sprintf("reply not delivered: %v %s", err, describeAcks(res.Acks))}
	}
	a.count = n
	return bus.ProcessResult{Processed: true, Message: "replied"}
}

func (a *chatAgent) handled() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.count
}

// syncWriter serialises writes from the participants' goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
