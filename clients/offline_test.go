package clients_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/internal/p2ptest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/pubsub"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/sign"
)

// agentScript is how one language runs the offline agent script.
type agentScript struct {
	lang string
	run  func(t *testing.T, args ...string) *process // a long-running mode
	once func(t *testing.T, args ...string) string   // a mode that exits
}

func pythonAgent(t *testing.T) agentScript {
	needPython(t)
	script := filepath.Join("python", "tests", "e2e_offline_agent.py")
	return agentScript{
		lang: "python",
		run: func(t *testing.T, args ...string) *process {
			return startScript(t, python, append([]string{script}, args...)...)
		},
		once: func(t *testing.T, args ...string) string {
			return run(t, ".", python, append([]string{script}, args...)...)
		},
	}
}

func jsAgent(t *testing.T) agentScript {
	script := filepath.Join(jsDir(t), "test", "e2e", "offline-agent.js")
	return agentScript{
		lang: "js",
		run: func(t *testing.T, args ...string) *process {
			return startScript(t, "node", append([]string{script}, args...)...)
		},
		once: func(t *testing.T, args ...string) string {
			return run(t, ".", "node", append([]string{script}, args...)...)
		},
	}
}

// waitLine waits until p has printed line (a whole line).
func waitLine(t *testing.T, p *process, line string) {
	t.Helper()
	wait.For(t, serveWait, func() error {
		if !slices.Contains(strings.Split(p.String(), "\n"), line) {
			return fmt.Errorf("no line %q yet:\n%s", line, p.String())
		}
		return nil
	})
}

// numbers returns the numbers of p's lines "PREFIX <n>", in order.
func numbers(p *process, prefix string) []int {
	var out []int
	for _, l := range strings.Split(p.String(), "\n") {
		if rest, ok := strings.CutPrefix(l, prefix+" "); ok {
			if n, err := strconv.Atoi(rest); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

func span(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}

// TestDurableClientsOffline: a Python (and a JS) agent's durable
// subscription reads three messages; the agent goes, its node is killed
// (SIGKILL), and six are published meanwhile, which the relay keeps; the node back on
// the same data and the agent subscribed again under the same name, it
// gets those six in order, then a live one, nothing twice but the last
// one read before the kill, whose answer the kill may have beaten. Each
// time, the agent lists the name it subscribed under (mesh.durables).
func TestDurableClientsOffline(t *testing.T) {
	bin := meshagent(t)
	dir := t.TempDir()
	relay := launch(t, bin, "relay", "keeper", "--data", filepath.Join(dir, "relay"), "--ws", "127.0.0.1:0")
	boot := relay.Addrs[0]
	pub := startNode(t, bin, "publisher", "--data", filepath.Join(dir, "pub"), "--bootstrap", boot)
	kept := keptCount(t, boot)
	for _, lang := range []func(*testing.T) agentScript{pythonAgent, jsAgent} {
		agent := lang(t)
		t.Run(agent.lang, func(t *testing.T) {
			family := "news-" + agent.lang
			publish := func(from, to int) {
				for i := from; i < to; i++ {
					out, errOut, err := cliRun(t, bin, "publish", fmt.Sprintf("%s:%d", family, i%3), "--payload", fmt.Sprintf(`{"n":%d}`, i), "--timeout", "10s", "--api", pub.API)
					if err != nil {
						t.Fatalf("publish %d: %v\n%s%s", i, err, out, errOut)
					}
				}
			}
			key, data := filepath.Join(dir, agent.lang+".key"), filepath.Join(dir, agent.lang)
			sub := launch(t, bin, "node", "sub-"+agent.lang, "--key", key, "--data", data, "--bootstrap", boot)
			reader := agent.run(t, "durable", "ws://"+sub.API+"/", family+":*", "reader")
			waitLine(t, reader, "subscribed")
			// The client lists the name it subscribed under, running.
			if !slices.Contains(strings.Split(reader.String(), "\n"), "kept reader active") {
				t.Fatalf("the agent's node does not list its durable name:\n%s", reader.String())
			}
			publish(0, 3)
			wait.For(t, serveWait, func() error {
				if got := numbers(reader, "msg"); !slices.Equal(got, span(0, 3)) {
					return fmt.Errorf("the agent has %v", got)
				}
				return nil
			})

			// Offline, agent then node: published meanwhile, kept by the
			// relay. The node saves a durable position when its client
			// leaves; it saves it after each delivery too, but a SIGKILL
			// between a delivery and its save would bring that message
			// again (the node cannot know whether the client read it).
			reader.kill()
			_ = reader.wait(t)
			waitNoClients(t, sub.API)
			sub.kill()
			_ = sub.wait(t)
			publish(3, 9)
			wait.For(t, serveWait, func() error {
				n, err := kept(family + ":*")
				if err == nil && n < 9 {
					err = fmt.Errorf("the relay keeps %d of 9", n)
				}
				return err
			})

			sub = launch(t, bin, "node", "sub-"+agent.lang, "--key", key, "--data", data, "--bootstrap", boot)
			reader = agent.run(t, "durable", "ws://"+sub.API+"/", family+":*", "reader")
			waitLine(t, reader, "subscribed")
			publish(9, 10)
			wait.For(t, serveWait, func() error {
				if got := numbers(reader, "msg"); !slices.Contains(got, 9) {
					return fmt.Errorf("the agent has %v, not yet the live one", got)
				}
				return nil
			})
			// The agent was killed right after it printed msg 2, and its
			// answer to that delivery may not have left: the position then
			// stays before msg 2, which comes again (at least once). Only
			// that one may repeat.
			if got := numbers(reader, "msg"); !slices.Equal(got, span(3, 10)) && !slices.Equal(got, span(2, 10)) {
				t.Errorf("back under the same name the agent got %v, want the six missed in order then the live one: %v (after msg 2 again, if the kill beat its answer)", got, span(3, 10))
			}
		})
	}
}

// TestDirectMessageToDownAgent: a JS agent sends a direct message to a
// Python agent whose node was killed; the message is queued, the
// sender's node restarts, and when the Python agent's node and the agent
// are back the message reaches it, once. The message needs a response:
// its node, back before the agent, refuses it until the agent takes
// direct messages again, and the sender retries (one that needs none is
// the node's own to log).
func TestDirectMessageToDownAgent(t *testing.T) {
	bin := meshagent(t)
	py, js := pythonAgent(t), jsAgent(t)
	dir := t.TempDir()
	keyS, keyR := filepath.Join(dir, "s.key"), filepath.Join(dir, "r.key")
	sender := launch(t, bin, "node", "sender", "--key", keyS, "--data", filepath.Join(dir, "s"))
	recipient := launch(t, bin, "node", "recipient", "--key", keyR, "--data", filepath.Join(dir, "r"), "--bootstrap", sender.Addrs[0])
	inbox := py.run(t, "inbox", "ws://"+recipient.API+"/")
	waitLine(t, inbox, "listening")
	waitConnected(t, sender.API, recipient.AgentID, true)

	recipient.kill()
	_ = recipient.wait(t)
	_ = inbox.wait(t)
	waitConnected(t, sender.API, recipient.AgentID, false)
	out := js.once(t, "send", "ws://"+sender.API+"/", recipient.AgentID, "while you were out")
	var res rpc.SendMessageResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &res); err != nil || !res.Queued || res.MessageID == "" {
		t.Fatalf("the JS agent's send to a down agent answered %s (%v), want queued", out, err)
	}

	sender.kill()
	_ = sender.wait(t)
	sender = launch(t, bin, "node", "sender", "--key", keyS, "--data", filepath.Join(dir, "s"))
	recipient = launch(t, bin, "node", "recipient", "--key", keyR, "--data", filepath.Join(dir, "r"), "--bootstrap", sender.Addrs[0])
	inbox = py.run(t, "inbox", "ws://"+recipient.API+"/")
	waitLine(t, inbox, "message while you were out")
	// A late duplicate would come from the outbox's next round: there is
	// none once the sender has it delivered.
	wait.Holds(t, 2*time.Second, func() error {
		if n := strings.Count(inbox.String(), "message while you were out"); n != 1 {
			return fmt.Errorf("the agent has the message %d times", n)
		}
		return nil
	})
}

// TestBusQueueGroupClients: two Python agents and a JS one join one bus
// queue group; each of thirty messages reaches one of them, and each of
// them gets some.
func TestBusQueueGroupClients(t *testing.T) {
	bin := meshagent(t)
	py, js := pythonAgent(t), jsAgent(t)
	a := startNode(t, bin, "a", "--data", filepath.Join(t.TempDir(), "a"))
	url := "ws://" + a.API + "/"
	members := map[string]*process{
		"py1": py.run(t, "group", url, "jobs:*", "workers", "py1"),
		"js":  js.run(t, "group", url, "jobs:*", "workers", "js"),
		"py2": py.run(t, "group", url, "jobs:*", "workers", "py2"),
	}
	for _, m := range members {
		waitLine(t, m, "subscribed")
	}
	const sent = 30
	for i := range sent {
		out, errOut, err := cliRun(t, bin, "send-message", "--bus", url, "--topic", fmt.Sprintf("jobs:%d", i), "--payload", fmt.Sprintf(`{"type":"job","n":%d}`, i))
		if err != nil {
			t.Fatalf("send-message %d: %v\n%s%s", i, err, out, errOut)
		}
	}
	// Each delivery was acknowledged before send-message returned; its
	// line may still be on its way through the pipe.
	var all []int
	wait.For(t, serveWait, func() error {
		all = nil
		for name, m := range members {
			all = append(all, numbers(m, "got "+name)...)
		}
		if len(all) < sent {
			return fmt.Errorf("the group has printed %d of %d", len(all), sent)
		}
		return nil
	})
	for name, m := range members {
		if len(numbers(m, "got "+name)) == 0 {
			t.Errorf("member %s got nothing", name)
		}
	}
	slices.Sort(all)
	if !slices.Equal(all, span(0, sent)) {
		t.Errorf("the group got %v, want each of 0..%d once", all, sent-1)
	}
}

// TestCallReceiptAndAnyClients: from each client, a call with a receipt
// (which verifies as the provider's signed answer) and a call without an
// agent id (the node chooses the provider, and says which).
func TestCallReceiptAndAnyClients(t *testing.T) {
	bin := meshagent(t)
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	writeCaps(t, caps, `[{"name": "echo", "description": "says it back", "handler": "echo"}]`)
	a := startNode(t, bin, "a", "--data", filepath.Join(dir, "a"), "--capabilities", caps)
	b := startNode(t, bin, "b", "--data", filepath.Join(dir, "b"), "--bootstrap", a.Addrs[0])
	for _, lang := range []func(*testing.T) agentScript{pythonAgent, jsAgent} {
		agent := lang(t)
		t.Run(agent.lang, func(t *testing.T) {
			out := agent.once(t, "calls", "ws://"+b.API+"/", a.AgentID)
			var receipt, anyAgent string
			for _, l := range strings.Split(out, "\n") {
				if r, ok := strings.CutPrefix(l, "receipt "); ok {
					receipt = r
				}
				if r, ok := strings.CutPrefix(l, "any "); ok {
					anyAgent = r
				}
			}
			rc, err := protocol.OpenReceipt([]byte(receipt))
			if err != nil {
				t.Fatalf("the receipt %q does not verify: %v\n%s", receipt, err, out)
			}
			if rc.Provider.String() != a.AgentID {
				t.Errorf("the receipt is signed by %s, want the provider %s", rc.Provider, a.AgentID)
			}
			if anyAgent != a.AgentID {
				t.Errorf("the call without an agent id says %q answered, want %s\n%s", anyAgent, a.AgentID, out)
			}
		})
	}
}

// waitConnected waits until the node at api holds a connection to agent
// (or holds none).
func waitConnected(t *testing.T, api, agent string, connected bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), serveWait)
	defer cancel()
	cl, err := rpc.Dial(ctx, api)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	wait.For(t, serveWait, func() error {
		peers, err := cl.Peers(ctx)
		if err != nil {
			return err
		}
		is := slices.ContainsFunc(peers, func(p protocol.PeerInfo) bool { return p.AgentID == agent && p.Connected })
		if is != connected {
			return fmt.Errorf("connected to %s: %v, want %v", agent, is, connected)
		}
		return nil
	})
}

// waitNoClients waits until the node at api holds no local API client
// but the one asking: the connections that left have had their
// subscriptions ended.
func waitNoClients(t *testing.T, api string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), serveWait)
	defer cancel()
	cl, err := rpc.Dial(ctx, api)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	wait.For(t, serveWait, func() error {
		var st rpc.StatusResult
		if err := cl.Call(ctx, rpc.MethodMeshStatus, nil, &st); err != nil {
			return err
		}
		if st.BusClients != 0 {
			return fmt.Errorf("the node still holds %d clients", st.BusClients)
		}
		return nil
	})
}

// keptCount asks the history keeper at addr, as a durable subscriber's
// node would, how many messages of a pattern it holds.
func keptCount(t *testing.T, keeper string) func(pattern string) (int, error) {
	t.Helper()
	h := p2ptest.Host(t)
	k, err := sign.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer, err := sign.NewSigner(k)
	if err != nil {
		t.Fatal(err)
	}
	topics, err := pubsub.New(h, signer, pubsub.WithFetchWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topics.Close() })
	ai, err := peer.AddrInfoFromP2pAddr(ma.StringCast(keeper))
	if err != nil {
		t.Fatal(err)
	}
	return func(pattern string) (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Connect(ctx, *ai); err != nil {
			return 0, err
		}
		msgs, _, err := topics.FetchHistory(ctx, pattern, time.Time{})
		return len(msgs), err
	}
}

// cliRun runs a meshagent command to completion.
func cliRun(t *testing.T, bin string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return (&serveEnv{bin: bin}).cli(t, args...)
}

func writeCaps(t *testing.T, path, caps string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(caps), 0o644); err != nil {
		t.Fatal(err)
	}
}
