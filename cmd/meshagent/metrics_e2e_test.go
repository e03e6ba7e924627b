//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/libp2p/go-libp2p"
	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/pubsub"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
)

// sample reads one sample's value from a scrape, or -1 when it is absent.
func sample(scrape, series string) float64 {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(scrape)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}

// checkFigures checks a scrape against exact values and lower bounds.
func checkFigures(scrape string, exact, atLeast map[string]float64) error {
	var errs []error
	for s, want := range exact {
		if got := sample(scrape, s); got != want {
			errs = append(errs, fmt.Errorf("%s = %v, want %v", s, got, want))
		}
	}
	for s, want := range atLeast {
		if got := sample(scrape, s); got < want {
			errs = append(errs, fmt.Errorf("%s = %v, want at least %v", s, got, want))
		}
	}
	return errors.Join(errs...)
}

// TestMetricsScrape scrapes a relay that served calls, had a topic
// message published to its subscriber and refused a forged one, delivered
// a bus message and dead-lettered another, and registered a lobby agent;
// and the node that called it and published. Every figure has its value,
// and promtool check metrics accepts the scrape when it is installed.
func TestMetricsScrape(t *testing.T) {
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[{"name": "echo", "handler": {"builtin": "echo"}}]`)
	a := startCommand(t, "relay", "alice", "--data", filepath.Join(dir, "a"), "--key", filepath.Join(dir, "a.key"),
		"--ws", "127.0.0.1:0", "--api", "127.0.0.1:0", "--capabilities", caps)
	b := startNode(t, "bob", "--data", filepath.Join(dir, "b"), "--key", filepath.Join(dir, "b.key"), "--bootstrap", a.started.Addrs[0])
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// Alice's local clients: a topic subscriber and a bus worker.
	news := make(chan protocol.TopicMessage, 8)
	sub, err := rpc.Dial(ctx, a.started.API)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if _, err := sub.Subscribe(ctx, "news:*", func(m protocol.TopicMessage) { news <- m }); err != nil {
		t.Fatal(err)
	}
	worker, err := rpc.Dial(ctx, a.started.API, rpc.WithRequestHandler(func(context.Context, string, json.RawMessage) (any, error) {
		return map[string]any{"processed": true}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer worker.Close()
	var ok bus.SuccessResult
	if err := worker.Call(ctx, "subscribe", map[string]any{"topic": "jobs:*"}, &ok); err != nil || !ok.Success {
		t.Fatalf("bus subscribe: %+v %v", ok, err)
	}
	var sent bus.SendResult
	if err := sub.Call(ctx, "sendMessage", map[string]any{"topic": "jobs:1", "payload": map[string]any{"type": "task_request", "text": "work"}}, &sent); err != nil || !sent.Success {
		t.Fatalf("sendMessage jobs:1: %+v %v", sent, err)
	}
	if err := sub.Call(ctx, "sendMessage", map[string]any{"topic": "nobody:1", "payload": map[string]any{"type": "task_request", "text": "lost"}}, &sent); err != nil || sent.Success {
		t.Fatalf("sendMessage nobody:1: %+v %v, want no success", sent, err)
	}

	// Bob calls alice's echo twice and publishes to her subscriber.
	caller, err := rpc.Dial(ctx, b.started.API)
	if err != nil {
		t.Fatal(err)
	}
	defer caller.Close()
	for i := range 2 {
		resp, err := caller.MeshCall(ctx, protocol.CallRequest{To: a.started.AgentID, Action: "echo", Params: json.RawMessage(`{"i":1}`)}, nil)
		if err != nil || resp.Status != protocol.StatusSuccess {
			t.Fatalf("call %d: %+v %v", i, resp, err)
		}
	}
	if n, err := caller.Publish(ctx, "news:today", json.RawMessage(`{"headline":"metrics"}`), nil, 20*time.Second); err != nil || n < 1 {
		t.Fatalf("publish: %d %v", n, err)
	}
	select {
	case <-news:
	case <-ctx.Done():
		t.Fatal("alice's subscriber did not get bob's message")
	}

	forgeTopicMessage(ctx, t, a)
	registerLobbyAgent(ctx, t, a)

	var scrape string
	exact := map[string]float64{
		`meshagent_calls_served_total{capability="echo",outcome="success"}`:         2,
		`meshagent_call_handler_seconds_count{capability="echo"}`:                   2,
		`meshagent_topic_messages_delivered_total{family="news"}`:                   1,
		`meshagent_topic_messages_rejected_total{family="news",reason="signature"}`: 1,
		`meshagent_refusals_total{reason="signature"}`:                              0,
		"meshagent_bus_clients":                          2,
		"meshagent_bus_subscriptions":                    1,
		`meshagent_bus_acks_total{outcome="processed"}`:  1,
		`meshagent_bus_acks_total{outcome="failed"}`:     0,
		"meshagent_bus_retries_total":                    0,
		"meshagent_bus_dead_letters_total":               1,
		"meshagent_store_dead_letters":                   1,
		"meshagent_store_outbox_messages":                0,
		"meshagent_lobby_registrations":                  1,
		`meshagent_lobby_registers_total{outcome="new"}`: 1,
		"meshagent_lobby_agents_connected":               1,
	}
	atLeast := map[string]float64{
		"meshagent_peers_connected":                                   2, // bob and the forger
		"meshagent_store_size_bytes":                                  1,
		"meshagent_store_commit_seconds_count":                        2, // the dead letter and the history
		`meshagent_dht_lookups_total{op="provide",outcome="success"}`: 1,
		`meshagent_dht_lookup_seconds_count{op="provide"}`:            1,
	}
	if err := wait.Until(20*time.Second, func() error {
		_, scrape = httpGet(t, "http://"+a.started.API+"/metrics")
		return checkFigures(scrape, exact, atLeast)
	}); err != nil {
		t.Errorf("alice's scrape: %v", err)
	}
	if !strings.Contains(scrape, "libp2p_rcmgr_limit{") || !strings.Contains(scrape, "libp2p_rcmgr_connections{") {
		t.Error("alice's scrape lacks go-libp2p's resource manager figures")
	}
	if strings.Contains(scrape, b.started.AgentID) {
		t.Error("an agent id is a label")
	}
	promtoolCheck(t, scrape)

	_, bs := httpGet(t, "http://"+b.started.API+"/metrics")
	if err := checkFigures(bs, map[string]float64{
		`meshagent_calls_sent_total{outcome="success"}`:           2,
		`meshagent_call_latency_seconds_count{outcome="success"}`: 2,
		`meshagent_topic_messages_published_total{family="news"}`: 1,
	}, nil); err != nil {
		t.Errorf("bob's scrape: %v", err)
	}
	promtoolCheck(t, bs)
}

// promtoolCheck runs promtool check metrics on a scrape when promtool is
// installed.
func promtoolCheck(t *testing.T, scrape string) {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not installed (Debian package prometheus); skipping its check of the scrape")
		return
	}
	cmd := exec.Command(path, "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// forgeTopicMessage publishes, from a bare GossipSub router with a test
// key, a news message whose envelope names another agent as its author:
// the signature is the test key's, so p's validator rejects it.
func forgeTopicMessage(ctx context.Context, t *testing.T, p *nodeProc) {
	t.Helper()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	m, err := ma.NewMultiaddr(p.started.Addrs[0])
	if err != nil {
		t.Fatal(err)
	}
	ai, err := peer.AddrInfoFromP2pAddr(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Connect(ctx, *ai); err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	t.Cleanup(rcancel)
	raw, err := libp2ppubsub.NewGossipSub(rctx, h,
		libp2ppubsub.WithMessageSignaturePolicy(libp2ppubsub.StrictNoSign),
		libp2ppubsub.WithMessageIdFn(pubsub.MessageID))
	if err != nil {
		t.Fatal(err)
	}
	topic, err := raw.Join(pubsub.GossipTopic("news:"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = topic.Close() })
	wait.For(t, 20*time.Second, func() error {
		for _, id := range topic.ListPeers() {
			if id == ai.ID {
				return nil
			}
		}
		return errors.New("the subscriber is not a topic peer of the forger yet")
	})
	forger, victim := testSigner(t), testSigner(t)
	e, err := protocol.NewEnvelope(protocol.TypeNotify, &protocol.Recipient{Broadcast: true, Topic: "news:forged"}, json.RawMessage(`{"headline":"forged"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _, err := protocol.Seal(victim, e)
	if err != nil {
		t.Fatal(err)
	}
	if err := topic.Publish(ctx, append(forger.Sign(body), body...)); err != nil {
		t.Fatal(err)
	}
}

func testSigner(t *testing.T) *sign.Signer {
	t.Helper()
	k, err := sign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := sign.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// registerLobbyAgent registers one agent with p's lobby and stays
// connected until the test ends.
func registerLobbyAgent(ctx context.Context, t *testing.T, p *nodeProc) {
	t.Helper()
	ws, _, err := websocket.Dial(ctx, "ws://"+p.started.WS+"/lobby", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ws.CloseNow() })
	frame, err := json.Marshal(lobby.Message{SenderID: "metrics_agent", ReceiverID: lobby.DefaultID, MessageType: lobby.TypeRegister, Payload: json.RawMessage(`{"capabilities":[]}`)})
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Write(ctx, websocket.MessageText, frame); err != nil {
		t.Fatal(err)
	}
	_, ack, err := ws.Read(ctx)
	if err != nil || !strings.Contains(string(ack), lobby.TypeRegisterAck) {
		t.Fatalf("REGISTER answered %s %v", ack, err)
	}
}
