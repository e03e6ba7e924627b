//go:build chaos && unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/lobby"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
)

// malformedPerEndpoint is how many malformed inputs each endpoint gets;
// honestEvery is how many of them pass between two honest operations.
const (
	malformedPerEndpoint = 1000
	honestEvery          = 25
)

// target is a relay process serving every endpoint an attacker reaches:
// the direct request and hello streams (libp2p), the bus and the lobby
// (--ws) and the local API (--api), with an echo capability.
type target struct {
	proc *nodeProc
	id   peer.ID
	ai   peer.AddrInfo
}

func startTarget(t *testing.T) *target {
	t.Helper()
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[{"name": "echo", "handler": "echo"}]`)
	p := startCommand(t, "relay", "target", "--data", filepath.Join(dir, "data"), "--ws", "127.0.0.1:0", "--api", "127.0.0.1:0", "--capabilities", caps)
	id, err := peer.Decode(p.started.AgentID)
	if err != nil {
		t.Fatal(err)
	}
	ai := peer.AddrInfo{ID: id}
	for _, a := range p.started.Addrs {
		m, err := ma.NewMultiaddr(a)
		if err != nil {
			t.Fatal(err)
		}
		info, err := peer.AddrInfoFromP2pAddr(m)
		if err != nil {
			t.Fatal(err)
		}
		ai.Addrs = append(ai.Addrs, info.Addrs...)
	}
	return &target{proc: p, id: id, ai: ai}
}

// alive fails the test if the target process has exited (a panic).
func (tg *target) alive(t *testing.T) {
	t.Helper()
	select {
	case <-tg.proc.exited:
		t.Fatalf("the target exited: %v\n%s", tg.proc.waitErr, tg.proc.stderr)
	default:
	}
	if strings.Contains(tg.proc.stderr.String(), "panic:") {
		t.Fatalf("the target panicked:\n%s", tg.proc.stderr)
	}
}

// attacker is a bare libp2p host with a test key, writing whatever frames
// it likes on meshagent's protocols; signer signs with the same key, so
// its frames pass the signature check.
type attacker struct {
	h      host.Host
	signer *sign.Signer
}

func newAttacker(t *testing.T, i int, tg *target) *attacker {
	t.Helper()
	k := meshtest.Key(t, i)
	h, err := libp2p.New(libp2p.Identity(k), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"), libp2p.DisableRelay())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	s, err := sign.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Connect(ctx, tg.ai); err != nil {
		t.Fatal(err)
	}
	return &attacker{h: h, signer: s}
}

// exchange writes frame on a fresh stream of proto and returns the first
// frame answered, or the error that ended the stream.
func (a *attacker) exchange(ctx context.Context, to peer.ID, proto libp2pprotocol.ID, frame []byte) ([]byte, error) {
	s, err := a.h.NewStream(network.WithAllowLimitedConn(ctx, "chaos"), to, proto)
	if err != nil {
		return nil, fmt.Errorf("open stream: %w", err)
	}
	defer func() { _ = s.Reset() }()
	_ = s.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := s.Write(frame); err != nil {
		return nil, fmt.Errorf("write: %w", err)
	}
	_ = s.CloseWrite()
	return protocol.NewFrameReader(s, 0).Next()
}

// envelope seals a request-shaped envelope with a raw payload.
func (a *attacker) seal(t *testing.T, s *sign.Signer, typ protocol.MessageType, to string, payload string, edit func(*protocol.Envelope)) []byte {
	t.Helper()
	e, err := protocol.NewEnvelope(typ, &protocol.Recipient{AgentID: to}, json.RawMessage(payload))
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(e)
	}
	body, sig, err := protocol.Seal(s, e)
	if err != nil {
		t.Fatal(err)
	}
	return protocol.AppendSignedFrame(nil, sig, body)
}

// malformedCase is one kind of malformed input and the answer it must get.
type malformedCase struct {
	name  string
	input func(i int) []byte
	want  string // the error code (or, for JSON-RPC, its number)
}

// honest runs fn every honestEvery inputs; each run must succeed.
type honestLog struct {
	runs, fails int
	firstErr    error
}

func (h *honestLog) run(fn func() error) {
	h.runs++
	if err := fn(); err != nil {
		h.fails++
		if h.firstErr == nil {
			h.firstErr = err
		}
	}
}

// TestChaosMalformed: 1,000 or more malformed inputs on each endpoint of
// a relay process (direct request stream, hello stream, bus, lobby, local
// API). Each gets its one correct answer (the right error code; a refused
// hello is a reset stream with no hello back), the process stays alive and
// serving, and honest clients interleaved with the attack (an honest mesh
// node calling echo, a bus client sending to a subscriber, a lobby agent
// discovering, a local API client) all succeed.
func TestChaosMalformed(t *testing.T) {
	tg := startTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()

	// The honest mesh peer.
	honestNode := meshtest.Node(t, 902)
	if err := honestNode.Connect(ctx, tg.ai); err != nil {
		t.Fatal(err)
	}
	if _, err := honestNode.WaitHello(ctx, tg.id); err != nil {
		t.Fatal(err)
	}
	honestCall := func() error {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		resp, err := honestNode.Call(cctx, protocol.CallRequest{To: tg.id.String(), Action: "echo", Params: json.RawMessage(`{"ok":true}`)})
		if err != nil {
			return fmt.Errorf("honest call: %w", err)
		}
		if resp.Status != protocol.StatusSuccess || string(resp.Result) != `{"ok":true}` {
			return fmt.Errorf("honest call answered %+v", resp)
		}
		return nil
	}

	report := func(endpoint string, n, right int, honest *honestLog, extra string) {
		t.Helper()
		tg.alive(t)
		figures(t, "malformed", "%s: %d inputs, %d answered correctly, 0 panics, %d/%d honest operations succeeded%s",
			endpoint, n, right, honest.runs-honest.fails, honest.runs, extra)
		if right != n {
			t.Errorf("%s: %d of %d malformed inputs answered correctly", endpoint, right, n)
		}
		if honest.fails > 0 {
			t.Errorf("%s: %d of %d honest operations failed; first: %v", endpoint, honest.fails, honest.runs, honest.firstErr)
		}
	}

	t.Run("direct stream", func(t *testing.T) {
		a := newAttacker(t, 901, tg)
		other, err := sign.NewSigner(meshtest.Key(t, 903))
		if err != nil {
			t.Fatal(err)
		}
		to := tg.id.String()
		req := `{"action":"echo","correlationId":"c-%d","params":{"x":1}}`
		cases := []malformedCase{
			{"garbage body", func(i int) []byte {
				b := make([]byte, 64+16+i%200)
				for j := range b {
					b[j] = byte(rand.IntN(256))
				}
				return protocol.AppendFrame(nil, b)
			}, string(protocol.CodeInvalidSignature)},
			{"too short", func(i int) []byte { return protocol.AppendFrame(nil, []byte("hi")[:i%2+1]) }, string(protocol.CodeInvalidMessage)},
			{"signed by another key", func(i int) []byte {
				f := a.seal(t, other, protocol.TypeRequest, to, fmt.Sprintf(req, i), nil)
				return f
			}, string(protocol.CodeInvalidSignature)},
			{"tampered", func(i int) []byte {
				f := a.seal(t, a.signer, protocol.TypeRequest, to, fmt.Sprintf(req, i), nil)
				return []byte(strings.Replace(string(f), `"x":1`, `"x":2`, 1))
			}, string(protocol.CodeInvalidSignature)},
			{"wrong recipient", func(i int) []byte {
				return a.seal(t, a.signer, protocol.TypeRequest, meshtest.ID(t, 904).String(), fmt.Sprintf(req, i), nil)
			}, string(protocol.CodeUnknownAgent)},
			{"stale", func(i int) []byte {
				return a.seal(t, a.signer, protocol.TypeRequest, to, fmt.Sprintf(req, i), func(e *protocol.Envelope) {
					e.Timestamp = protocol.FormatTime(time.Now().Add(-time.Hour))
				})
			}, string(protocol.CodeInvalidMessage)},
			{"no correlationId", func(i int) []byte {
				return a.seal(t, a.signer, protocol.TypeRequest, to, `{"action":"echo"}`, nil)
			}, string(protocol.CodeInvalidMessage)},
			{"unknown capability", func(i int) []byte {
				return a.seal(t, a.signer, protocol.TypeRequest, to, fmt.Sprintf(`{"action":"nope-%d","correlationId":"u-%d"}`, i, i), nil)
			}, string(protocol.CodeCapabilityNotSupported)},
		}
		var right int
		honest := &honestLog{}
		got := map[string]int{}
		for i := range malformedPerEndpoint {
			c := cases[i%len(cases)]
			frame, err := a.exchange(ctx, tg.id, protocol.RequestProtocol, c.input(i))
			code := "no answer: " + fmt.Sprint(err)
			if err == nil {
				code = answerCode(frame, tg.id)
			}
			got[c.name+" -> "+code]++
			if code == c.want {
				right++
			}
			if i%honestEvery == 0 {
				honest.run(honestCall)
			}
		}
		logHistogram(t, got)
		report(strings.TrimPrefix(t.Name(), "TestChaosMalformed/"), malformedPerEndpoint, right, honest, "")
	})

	t.Run("hello stream", func(t *testing.T) {
		a := newAttacker(t, 905, tg)
		other, err := sign.NewSigner(meshtest.Key(t, 906))
		if err != nil {
			t.Fatal(err)
		}
		to := tg.id.String()
		cases := []malformedCase{
			{"garbage", func(i int) []byte {
				b := make([]byte, 1+i%300)
				for j := range b {
					b[j] = byte(rand.IntN(256))
				}
				return protocol.AppendFrame(nil, b)
			}, "refused"},
			{"signed by another key", func(i int) []byte { return a.seal(t, other, protocol.TypeHello, to, `{}`, nil) }, "refused"},
			{"a request, not a hello", func(i int) []byte {
				return a.seal(t, a.signer, protocol.TypeHello, to, `{}`, func(e *protocol.Envelope) { e.Type = protocol.TypeRequest })
			}, "refused"},
			{"capabilities of the wrong type", func(i int) []byte { return a.seal(t, a.signer, protocol.TypeHello, to, `{"capabilities":"all"}`, nil) }, "refused"},
			{"seq of the wrong type", func(i int) []byte { return a.seal(t, a.signer, protocol.TypeHello, to, `{"seq":"1"}`, nil) }, "refused"},
			// A length prefix of 32 MiB, far above the hello limit.
			{"oversize announced", func(i int) []byte { return []byte{0xff, 0xff, 0xff, 0x0f} }, "refused"},
		}
		var right int
		honest := &honestLog{}
		for i := range malformedPerEndpoint {
			c := cases[i%len(cases)]
			frame, err := a.exchange(ctx, tg.id, protocol.HelloProtocol, c.input(i))
			if err != nil && frame == nil {
				right++ // reset, nothing answered
			}
			if i%honestEvery == 0 {
				honest.run(honestCall)
			}
		}
		// A fresh honest peer is greeted.
		honest.run(func() error {
			fresh := meshtest.Node(t, 907)
			hctx, hcancel := context.WithTimeout(ctx, 10*time.Second)
			defer hcancel()
			if err := fresh.Connect(hctx, tg.ai); err != nil {
				return err
			}
			_, err := fresh.WaitHello(hctx, tg.id)
			return err
		})
		report(strings.TrimPrefix(t.Name(), "TestChaosMalformed/"), malformedPerEndpoint, right, honest, "")
	})

	busURL := "ws://" + tg.proc.started.WS + "/"
	t.Run("bus", func(t *testing.T) {
		sub := &busSession{url: busURL, id: "honest-sub", topics: []string{"honest:*"}, handler: func(context.Context, string, json.RawMessage) (any, error) {
			return map[string]any{"processed": true}, nil
		}}
		if _, err := sub.client(ctx); err != nil {
			t.Fatal(err)
		}
		defer sub.drop()
		pub := &busSession{url: busURL, id: "honest-pub"}
		defer pub.drop()
		sent := 0
		honest := &honestLog{}
		honestSend := func() error {
			cl, err := pub.client(ctx)
			if err != nil {
				return err
			}
			sent++
			var res bus.SendResult
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			defer ccancel()
			if err := cl.Call(cctx, "sendMessage", map[string]any{"topic": fmt.Sprintf("honest:%d", sent), "payload": map[string]any{"type": "event", "n": sent}}, &res); err != nil {
				return err
			}
			for _, a := range res.Acks {
				if a.ClientID == "honest-sub" && a.Processed {
					return nil
				}
			}
			return fmt.Errorf("honest message not processed: %+v", res)
		}
		raw := dialRaw(t, ctx, busURL)
		if code := raw.rpc(ctx, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"clientId":"attacker","clientInfo":{"name":"x"}}}`); code != "ok" {
			t.Fatalf("initialize: %s", code)
		}
		right := rpcFlood(t, ctx, raw, append(commonRPCCases(), busRPCCases...), func() { honest.run(honestSend); honest.run(honestCall) })
		report(strings.TrimPrefix(t.Name(), "TestChaosMalformed/"), malformedPerEndpoint, right, honest, "")
	})

	t.Run("local API", func(t *testing.T) {
		api, err := rpc.Dial(ctx, tg.proc.started.API)
		if err != nil {
			t.Fatal(err)
		}
		defer api.Close()
		honest := &honestLog{}
		honestID := func() error {
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			defer ccancel()
			id, err := api.AgentID(cctx)
			if err != nil || id != tg.id.String() {
				return fmt.Errorf("mesh.id: %q, %v", id, err)
			}
			return nil
		}
		raw := dialRaw(t, ctx, tg.proc.started.API)
		// Seed 001: initialize first on every listener, or every method
		// is -32006 and the mesh.* decoders are never reached.
		if code := raw.rpc(ctx, `{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"clientId":"api-attacker","clientInfo":{"name":"x"}}}`); code != "ok" {
			t.Fatalf("initialize: %s", code)
		}
		right := rpcFlood(t, ctx, raw, append(commonRPCCases(), apiRPCCases...), func() { honest.run(honestID); honest.run(honestCall) })
		report(strings.TrimPrefix(t.Name(), "TestChaosMalformed/"), malformedPerEndpoint, right, honest, "")
	})

	t.Run("lobby", func(t *testing.T) {
		lobbyURL := "ws://" + tg.proc.started.WS + "/lobby"
		honest := &honestLog{}
		registered := 0
		honestRegister := func() error {
			registered++
			c := dialRaw(t, ctx, lobbyURL)
			defer c.close()
			id := fmt.Sprintf("honest_%d", registered)
			if err := c.send(ctx, `{"sender_id":"`+id+`","receiver_id":"global_lobby","message_type":"REGISTER","payload":{"capabilities":[{"name":"x"}]}}`); err != nil {
				return err
			}
			m, err := c.next(ctx)
			if err != nil {
				return err
			}
			if !strings.Contains(m, `"message_type":"REGISTER_ACK"`) {
				return fmt.Errorf("REGISTER answered %s", m)
			}
			return nil
		}
		raw := dialRaw(t, ctx, lobbyURL)
		if err := raw.send(ctx, `{"sender_id":"intruder","receiver_id":"global_lobby","message_type":"REGISTER","payload":{"capabilities":[]}}`); err != nil {
			t.Fatal(err)
		}
		if m, err := raw.next(ctx); err != nil || !strings.Contains(m, "REGISTER_ACK") {
			t.Fatalf("REGISTER: %s %v", m, err)
		}
		var right int
		got := map[string]int{}
		for i := range malformedPerEndpoint {
			c := lobbyCases[i%len(lobbyCases)]
			code := "no answer"
			if err := raw.send(ctx, string(c.input(i))); err != nil {
				code = "send: " + err.Error()
			} else if m, err := raw.next(ctx); err != nil {
				code = "read: " + err.Error()
			} else {
				code = lobbyErrorCode(m)
			}
			got[c.name+" -> "+code]++
			if code == c.want {
				right++
			}
			if i%honestEvery == 0 {
				honest.run(honestRegister)
				honest.run(honestCall)
			}
		}
		logHistogram(t, got)
		report(strings.TrimPrefix(t.Name(), "TestChaosMalformed/"), malformedPerEndpoint, right, honest, "")
	})
}

// rawWS is a WebSocket connection written and read by hand.
type rawWS struct {
	c *websocket.Conn
}

func dialRaw(t *testing.T, ctx context.Context, url string) *rawWS {
	t.Helper()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(dctx, rpc.NormalizeURL(url), nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(1 << 20)
	r := &rawWS{c: c}
	t.Cleanup(r.close)
	return r
}

func (r *rawWS) close() { _ = r.c.CloseNow() }

func (r *rawWS) send(ctx context.Context, text string) error {
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return r.c.Write(wctx, websocket.MessageText, []byte(text))
}

// next reads the next message, waiting at most 5 s.
func (r *rawWS) next(ctx context.Context) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, b, err := r.c.Read(rctx)
	return string(b), err
}

// rpc sends one JSON-RPC message and returns "ok" for a result, the error
// code's number for an error, or what went wrong. Server requests and
// notifications met on the way are skipped.
func (r *rawWS) rpc(ctx context.Context, text string) string {
	if err := r.send(ctx, text); err != nil {
		return "send: " + err.Error()
	}
	for {
		m, err := r.next(ctx)
		if err != nil {
			return "read: " + err.Error()
		}
		var resp struct {
			Method *string          `json:"method"`
			Result *json.RawMessage `json:"result"`
			Error  *struct {
				Code int `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(m), &resp); err != nil {
			return fmt.Sprintf("unreadable answer %q", m)
		}
		switch {
		case resp.Method != nil:
			continue
		case resp.Error != nil:
			return fmt.Sprint(resp.Error.Code)
		case resp.Result != nil:
			return "ok"
		}
		return fmt.Sprintf("answer %q", m)
	}
}

// rpcCase is one kind of malformed JSON-RPC input and the error code it
// must get (seed 001 and JSON-RPC 2.0's).
type rpcCase struct {
	name  string
	input func(i int) string
	want  int
}

// commonRPCCases are refused alike by the bus and the local API.
func commonRPCCases() []rpcCase {
	return []rpcCase{
		{"not JSON", func(i int) string { return fmt.Sprintf("hello %d", i) }, rpc.CodeParseError},
		{"truncated", func(i int) string { return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"sendMe`, i) }, rpc.CodeParseError},
		{"invalid UTF-8", func(i int) string { return "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\xff\xfe\"}" }, rpc.CodeParseError},
		{"method not a string", func(i int) string { return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":5}`, i) }, rpc.CodeInvalidRequest},
		{"wrong jsonrpc", func(i int) string { return fmt.Sprintf(`{"jsonrpc":"1.0","id":%d,"method":"ping"}`, i) }, rpc.CodeInvalidRequest},
		{"id an object", func(i int) string { return `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}` }, rpc.CodeInvalidRequest},
		{"empty batch", func(i int) string { return `[]` }, rpc.CodeInvalidRequest},
		{"unknown method", func(i int) string { return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"nope.%d"}`, i, i) }, rpc.CodeMethodNotFound},
	}
}

// busRPCCases are the bus's own (the connection is initialized). Seed 001
// answers a subscribe without a usable topic with -32600, and the bus's
// methods take their params as an object.
var busRPCCases = []rpcCase{
	{"topic a number", func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"subscribe","params":{"topic":5}}`, i)
	}, rpc.CodeInvalidRequest},
	{"params an array", func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"subscribe","params":[1,2]}`, i)
	}, rpc.CodeInvalidRequest},
	{"payload a string", func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"sendMessage","params":{"topic":"t:1","payload":"x"}}`, i)
	}, rpc.CodeInvalidParams},
	{"send to a pattern", func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"sendMessage","params":{"topic":"t:*","payload":{}}}`, i)
	}, rpc.CodeInvalidParams},
	{"initialize again", func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"clientId":"x%d","clientInfo":{"name":"x"}}}`, i, i)
	}, rpc.CodeAlreadyInitialized},
	{"unsubscribe unknown", func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"unsubscribe","params":{"topic":"never:%d"}}`, i, i)
	}, rpc.CodeSubscriptionNotFound},
}

// apiRPCCases are the local API's mesh methods with wrong-typed params.
var apiRPCCases = []rpcCase{
	{"mesh.call agentId a number", func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"mesh.call","params":{"agentId":5,"capability":"echo"}}`, i)
	}, rpc.CodeInvalidParams},
	{"mesh.call timeoutMs a string", func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"mesh.call","params":{"agentId":"x","capability":"echo","timeoutMs":"10"}}`, i)
	}, rpc.CodeInvalidParams},
	{"mesh.publish topic a number", func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"mesh.publish","params":{"topic":7,"payload":{}}}`, i)
	}, rpc.CodeInvalidParams},
	{"mesh.subscribe pattern an array", func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"mesh.subscribe","params":{"pattern":[1]}}`, i)
	}, rpc.CodeInvalidParams},
	{"params neither object nor array", func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"mesh.taskStatus","params":"x"}`, i)
	}, rpc.CodeInvalidRequest},
}

// rpcFlood sends malformedPerEndpoint inputs cycling through cases, one at
// a time, running honest every honestEvery inputs, and returns how many
// got the right error code.
func rpcFlood(t *testing.T, ctx context.Context, raw *rawWS, cases []rpcCase, honest func()) int {
	t.Helper()
	right := 0
	got := map[string]int{}
	for i := range malformedPerEndpoint {
		c := cases[i%len(cases)]
		code := raw.rpc(ctx, c.input(i))
		got[c.name+" -> "+code]++
		if code == fmt.Sprint(c.want) {
			right++
		}
		if i%honestEvery == 0 {
			honest()
		}
	}
	logHistogram(t, got)
	return right
}

func logHistogram(t *testing.T, got map[string]int) {
	t.Helper()
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		t.Logf("%5d %s", got[k], k)
	}
}

// lobbyCases are malformed seed 000 messages and the ERROR code each must
// get.
var lobbyCases = []malformedCase{
	{"not JSON", func(i int) []byte { return []byte(fmt.Sprintf("not json %d", i)) }, string(protocol.CodeInvalidMessage)},
	{"invalid UTF-8", func(i int) []byte { return []byte("\xff\xfe") }, string(protocol.CodeInvalidMessage)},
	{"an array", func(i int) []byte { return []byte(`[1,2]`) }, string(protocol.CodeInvalidMessage)},
	{"duplicate member", func(i int) []byte { return []byte(`{"sender_id":"a","sender_id":"b","message_type":"REGISTER"}`) }, string(protocol.CodeInvalidMessage)},
	{"no message_type", func(i int) []byte { return []byte(`{"sender_id":"intruder"}`) }, string(protocol.CodeInvalidMessage)},
	{"sender_id a number", func(i int) []byte { return []byte(`{"sender_id":5,"message_type":"REGISTER"}`) }, string(protocol.CodeInvalidMessage)},
	{"payload an array", func(i int) []byte { return []byte(`{"sender_id":"intruder","message_type":"REGISTER","payload":[]}`) }, string(protocol.CodeInvalidMessage)},
	{"id too long", func(i int) []byte {
		return []byte(`{"sender_id":"` + strings.Repeat("x", 300) + `","message_type":"REGISTER"}`)
	}, string(protocol.CodeInvalidMessage)},
	{"unknown type", func(i int) []byte { return []byte(`{"sender_id":"intruder","message_type":"HELLO"}`) }, string(protocol.CodeInvalidMessage)},
	{"lobby's own type", func(i int) []byte { return []byte(`{"sender_id":"intruder","message_type":"REGISTER_ACK"}`) }, string(protocol.CodeInvalidMessage)},
	{"forged token", func(i int) []byte {
		return []byte(fmt.Sprintf(`{"sender_id":"intruder","receiver_id":"global_lobby","message_type":"DISCOVER_SERVICES","payload":{"capability_name":"x"},"conversation_id":"c%d","auth_token":"forged"}`, i))
	}, string(protocol.CodeUnauthorized)},
	{"no token", func(i int) []byte {
		return []byte(`{"sender_id":"intruder","receiver_id":"global_lobby","message_type":"DISCOVER_SERVICES","payload":{"capability_name":"x"}}`)
	}, string(protocol.CodeUnauthorized)},
}

// lobbyErrorCode returns the code of a lobby ERROR, or what else came.
func lobbyErrorCode(m string) string {
	var msg struct {
		MessageType string `json:"message_type"`
		Payload     struct {
			Code string `json:"code"`
		} `json:"payload"`
	}
	if err := json.Unmarshal([]byte(m), &msg); err != nil {
		return fmt.Sprintf("unreadable %q", m)
	}
	if msg.MessageType != lobby.TypeError {
		return "not an ERROR: " + msg.MessageType
	}
	return msg.Payload.Code
}

// answerCode returns the error code of a signed answer frame from p, or
// "success" / a description of what was wrong with it.
func answerCode(frame []byte, p peer.ID) string {
	sig, body, err := protocol.SplitSigned(frame)
	if err != nil {
		return "unsplittable answer"
	}
	e, err := protocol.Open(body, sig, p)
	if err != nil {
		return "unverifiable answer"
	}
	_, err = protocol.DecodeResponse(e)
	var pe *protocol.Error
	switch {
	case err == nil:
		return "success"
	case errors.As(err, &pe):
		return string(pe.Code)
	}
	return "undecodable answer: " + err.Error()
}

// TestChaosMalformedSignedTypes: validly signed requests (a test key, so
// they pass the signature check) whose payload members have the wrong
// JSON type. Each must be answered INVALID_MESSAGE, and the node must
// live (issue 12 defect 1: one such frame made it panic and exit).
func TestChaosMalformedSignedTypes(t *testing.T) {
	tg := startTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	a := newAttacker(t, 911, tg)
	to := tg.id.String()
	payloads := []string{
		`{"action":5,"correlationId":"c-%d","params":{}}`,
		`{"action":"echo","correlationId":%d,"params":{}}`,
		`{"action":"echo","correlationId":"c-%d","params":{},"timeout":"10000"}`,
		`{"action":"echo","correlationId":"c-%d","params":"x"}`,
		`{"action":["echo"],"correlationId":"c-%d"}`,
		`{"action":"echo","correlationId":{"id":%d}}`,
	}
	right := 0
	got := map[string]int{}
	for i := range malformedPerEndpoint {
		p := fmt.Sprintf(payloads[i%len(payloads)], i)
		frame, err := a.exchange(ctx, tg.id, protocol.RequestProtocol, a.seal(t, a.signer, protocol.TypeRequest, to, p, nil))
		code := "no answer: " + fmt.Sprint(err)
		if err == nil {
			code = answerCode(frame, tg.id)
		}
		got[fmt.Sprint(i%len(payloads))+" -> "+code]++
		if code == string(protocol.CodeInvalidMessage) {
			right++
		}
		select {
		case <-tg.proc.exited:
			t.Fatalf("the target exited after signed payload %s: %v\n%s", p, tg.proc.waitErr, tg.proc.stderr)
		default:
		}
	}
	logHistogram(t, got)
	tg.alive(t)
	figures(t, "malformed", "signed wrong-typed requests: %d inputs, %d answered INVALID_MESSAGE, 0 panics", malformedPerEndpoint, right)
	if right != malformedPerEndpoint {
		t.Errorf("%d of %d answered INVALID_MESSAGE", right, malformedPerEndpoint)
	}
}
