package clienttest

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/rpctest"
	"github.com/meshagent/meshagent/rpc"
)

// Timeout bounds the whole exchange, the script's start included.
const Timeout = 30 * time.Second

// Client is a bus client script under test, which takes the flags --url,
// --id, --subscribe, --send, --text and --count and prints, in order,
// "initialized: server <agent id>", "subscribed: <topic>", the result of
// its send with each ack, "ping: <RFC 3339 time>", and each message it
// receives, which it acknowledges as "<id> got it".
type Client struct {
	// Command is the program and the arguments before the flags, such
	// as {"node", "client.js"}.
	Command []string
	// Dir is where it runs; empty for the test's directory.
	Dir string
	// Env is added to the test's environment.
	Env []string
	// ID is its client id, Topic the subscription it takes and Text what
	// it sends on outbound:42.
	ID, Topic, Text string
}

// Run runs c against a node's bus and checks what the script and the Go
// peer see.
func Run(t *testing.T, c Client) {
	t.Helper()
	ctx := meshtest.Context(t, Timeout)
	n := meshtest.Node(t, 0)
	srv := rpctest.Start(t, n, rpctest.WithBus(bus.WithTopics(n), bus.WithForwarder(n)))

	// The Go peer subscribes to outbound:* and acknowledges what it gets.
	got := make(chan bus.ProcessParams, 1)
	peer, err := rpc.Dial(ctx, srv.URL, rpc.WithClientID("go-peer"), rpc.WithClientInfo(rpc.ClientInfo{Name: "test"}), rpc.WithRequestHandler(func(_ context.Context, method string, params json.RawMessage) (any, error) {
		var p bus.ProcessParams
		if err := json.Unmarshal(params, &p); err != nil {
			return nil, err
		}
		var payload struct{ Text string }
		_ = json.Unmarshal(p.Payload, &payload)
		select {
		case got <- p:
		default:
		}
		return bus.ProcessResult{Processed: true, Message: "go-peer got " + payload.Text}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = peer.Close() })
	if err := peer.Call(ctx, bus.MethodSubscribe, map[string]string{"topic": "outbound:*"}, nil); err != nil {
		t.Fatal(err)
	}

	args := append(slices.Clone(c.Command[1:]), "--url", srv.URL, "--id", c.ID,
		"--subscribe", c.Topic, "--send", "outbound:42", "--text", c.Text, "--count", "1")
	s := startScript(ctx, t, c, args)
	ping := s.waitFor(t, "ping: ") // printed after subscribe and sendMessage
	if _, err := time.Parse(time.RFC3339Nano, strings.TrimPrefix(ping, "ping: ")); err != nil {
		t.Errorf("ping line %q: %v", ping, err)
	}
	select {
	case p := <-got:
		if p.Topic != "outbound:42" || !strings.Contains(string(p.Payload), `"text":"`+c.Text+`"`) || !strings.Contains(string(p.Payload), `"type":"plaintext_message"`) {
			t.Errorf("the Go peer got %s %s", p.Topic, p.Payload)
		}
	default:
		t.Error("the script printed its acks but the Go peer got no processMessage")
	}

	var res bus.SendResult
	err = peer.Call(ctx, bus.MethodSendMessage, map[string]any{"topic": c.Topic,
		"payload": json.RawMessage(`{"type":"plaintext_message","text":"hello, script"}`)}, &res)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Success || !slices.Contains(res.Acks, bus.Ack{ClientID: c.ID, Processed: true, Message: c.ID + " got it"}) {
		t.Errorf("sendMessage to the script: %+v", res)
	}

	out := s.wait(t)
	t.Logf("%s printed:\n%s", strings.Join(c.Command, " "), out)
	for _, want := range []string{
		"initialized: server " + n.AgentID(),
		"subscribed: " + c.Topic,
		"sent outbound:42: success=true messageId=",
		"  ack go-peer: processed=true go-peer got " + c.Text,
		"received " + c.Topic + `: {"type":"plaintext_message","text":"hello, script"}`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
