package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/rpc"
)

// busPeer is a seed 001 client of the relay, in process: it records the
// messages it is given and answers processed.
type busPeer struct {
	*rpc.Client
	mu  sync.Mutex
	got []string // topic=text
}

func dialBusPeer(t *testing.T, url, id string, topics ...string) *busPeer {
	t.Helper()
	p := &busPeer{}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, url, rpc.WithClientID(id), rpc.WithClientInfo(rpc.ClientInfo{Name: "e2e"}), rpc.WithRequestHandler(func(_ context.Context, method string, params json.RawMessage) (any, error) {
		var pp struct {
			Topic   string `json:"topic"`
			Payload struct {
				Text string `json:"text"`
			} `json:"payload"`
		}
		_ = json.Unmarshal(params, &pp)
		p.mu.Lock()
		p.got = append(p.got, pp.Topic+"="+pp.Payload.Text)
		p.mu.Unlock()
		return map[string]any{"processed": true, "message": "thanks from " + id}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	p.Client = cl
	for _, topic := range topics {
		if err := cl.Call(ctx, "subscribe", map[string]any{"topic": topic}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func (p *busPeer) received() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.got, " ")
}

// busCommand runs a bus client command against url.
func busCommand(t *testing.T, url string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(env(t), "MESHAGENT_BUS_URL="+url, "BUB_AGENT_ID=cli-agent")
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("meshagent %v: %v", args, err)
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String()}
}

// TestRelay runs `meshagent relay` and a plain node bootstrapped to it,
// and drives the relay's bus as seed 001's clients and CLI would.
func TestRelay(t *testing.T) {
	dir := t.TempDir()
	rl := startCommand(t, "relay", "relay", "--data", filepath.Join(dir, "relay"), "--ws", "127.0.0.1:0")
	if rl.started.WS == "" {
		t.Fatalf("relay printed no ws address: %+v", rl.started)
	}
	url := "ws://" + rl.started.WS + "/"
	// The admin methods (history, dead letters) are served on the
	// loopback local API, not to anonymous clients of the public --ws.
	api := "ws://" + rl.started.API + "/"
	bridge := dialBusPeer(t, url, "telegram-bridge", "outbound:*")

	t.Run("send-message prints the aggregated acks", func(t *testing.T) {
		res := busCommand(t, url, "send-message", "--topic", "outbound:1", "--payload", `{"type":"plaintext_message","text":"hi"}`).must(t, 0)
		var sr bus.SendResult
		if err := json.Unmarshal([]byte(res.stdout), &sr); err != nil {
			t.Fatalf("stdout %q: %v", res.stdout, err)
		}
		if !sr.Success || len(sr.Acks) == 0 || sr.Acks[0].ClientID != "telegram-bridge" || !sr.Acks[0].Processed || sr.Acks[0].Message != "thanks from telegram-bridge" {
			t.Errorf("result %s", res.stdout)
		}
		if bridge.received() != "outbound:1=hi" {
			t.Errorf("bridge received %q", bridge.received())
		}
	})
	t.Run("BUB_DEFAULT_TOPIC and a payload on stdin", func(t *testing.T) {
		cmd := exec.Command(binary, "send-message", "--payload", "-")
		cmd.Env = append(env(t), "BUB_BUS_URL="+url, "BUB_DEFAULT_TOPIC=outbound:2")
		cmd.Stdin = strings.NewReader(`{"type":"plaintext_message","text":"from stdin"}`)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		wait.For(t, 10*time.Second, func() error {
			if !strings.Contains(bridge.received(), "outbound:2=from stdin") {
				return fmt.Errorf("bridge received %q", bridge.received())
			}
			return nil
		})
	})
	t.Run("dead letter, list, replay", func(t *testing.T) {
		res := busCommand(t, url, "send-message", "--topic", "orders:7", "--payload", `{"type":"plaintext_message","text":"nobody yet"}`).must(t, 1)
		if !strings.Contains(res.stderr, "dead-letter queue") {
			t.Errorf("stderr %q", res.stderr)
		}
		list := busCommand(t, api, "dlq", "list", "--json").must(t, 0)
		var dl bus.StoredMessage
		if err := json.Unmarshal([]byte(strings.TrimSpace(list.stdout)), &dl); err != nil || dl.Topic != "orders:7" || dl.From != "cli-agent" {
			t.Fatalf("dlq list %q (%v)", list.stdout, err)
		}
		orders := dialBusPeer(t, url, "orders", "orders:*")
		busCommand(t, api, "dlq", "replay", dl.ID).must(t, 0)
		wait.For(t, 20*time.Second, func() error {
			if orders.received() != "orders:7=nobody yet" {
				return fmt.Errorf("orders received %q", orders.received())
			}
			return nil
		})
		if out := busCommand(t, api, "dlq", "list").must(t, 0).stdout; strings.TrimSpace(out) != "no messages" {
			t.Errorf("dlq after replay: %q", out)
		}
	})
	t.Run("history", func(t *testing.T) {
		wait.For(t, 10*time.Second, func() error {
			res := busCommand(t, api, "history", "--topic", "outbound:*", "--agent", "cli-agent", "--json")
			if res.code != 0 {
				return fmt.Errorf("history exited %d: %s", res.code, res.stderr)
			}
			if n := len(lines(res.stdout)); n != 1 {
				// outbound:2 was sent by a generated client id.
				return fmt.Errorf("history printed %d lines: %s", n, res.stdout)
			}
			return nil
		})
		busCommand(t, api, "history", "--since", "yesterday").must(t, 2)
	})
	t.Run("a node's local subscriber gets relay messages through the mesh", func(t *testing.T) {
		n := startNode(t, "n1", "--data", filepath.Join(dir, "n1"), "--bootstrap", rl.started.Addrs[0])
		sub := startSubscriber(t, n.started.API, "outbound:*", 1)
		// Until the node's subscription has reached the relay through the
		// mesh, the relay's copy has nowhere to go: send until one lands.
		var first string
		wait.For(t, 60*time.Second, func() error {
			busCommand(t, url, "send-message", "--topic", "outbound:mesh", "--payload", `{"type":"plaintext_message","text":"across"}`).must(t, 0)
			select {
			case first = <-sub.lines:
				return nil
			case <-time.After(time.Second): // one send's chance to arrive
				return errors.New("the node's subscriber has received nothing yet")
			}
		})
		var m topicMessage
		// The first to land may be an earlier outbound message whose mesh
		// copy was still waiting for a subscriber: any of the relay's will do.
		if err := json.Unmarshal([]byte(first), &m); err != nil || !strings.HasPrefix(m.Topic, "outbound:") || m.From != rl.started.AgentID {
			t.Errorf("node subscriber got %q (%v)", first, err)
		}
		n.stop(t, 20*time.Second)
	})
	t.Run("two relays exchange messages through the mesh", func(t *testing.T) {
		rl2 := startCommand(t, "relay", "relay2", "--data", filepath.Join(dir, "relay2"), "--ws", "127.0.0.1:0", "--bootstrap", rl.started.Addrs[0])
		url2 := "ws://" + rl2.started.WS + "/"
		far := dialBusPeer(t, url2, "far-bridge", "alerts:*")
		// Each way: relay 1's client to relay 2's subscriber, and back.
		wait.For(t, 60*time.Second, func() error {
			busCommand(t, url, "send-message", "--topic", "alerts:1", "--payload", `{"type":"plaintext_message","text":"east to west"}`)
			if !strings.Contains(far.received(), "alerts:1=east to west") {
				return fmt.Errorf("relay 2's subscriber received %q", far.received())
			}
			return nil
		})
		near := dialBusPeer(t, url, "near-bridge", "replies:*")
		wait.For(t, 60*time.Second, func() error {
			busCommand(t, url2, "send-message", "--topic", "replies:1", "--payload", `{"type":"plaintext_message","text":"west to east"}`)
			if !strings.Contains(near.received(), "replies:1=west to east") {
				return fmt.Errorf("relay 1's subscriber received %q", near.received())
			}
			return nil
		})
		rl2.stop(t, 20*time.Second)
	})
	rl.stop(t, 20*time.Second)
}

// TestRelayKilled: a message the relay acknowledged as retrying survives
// the relay being killed with SIGKILL; the restarted relay (same --data)
// delivers it once the subscriber is back.
func TestRelayKilled(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "relay")
	rl := startCommand(t, "relay", "relay", "--data", dir, "--ws", "127.0.0.1:0")
	url := "ws://" + rl.started.WS + "/"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	busy, err := rpc.Dial(ctx, url, rpc.WithClientID("worker"), rpc.WithRequestHandler(func(context.Context, string, json.RawMessage) (any, error) {
		return map[string]any{"processed": false, "should_retry": true, "retry_seconds": 1, "message": "busy, later"}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	if err := busy.Call(ctx, "subscribe", map[string]any{"topic": "jobs:*"}, nil); err != nil {
		t.Fatal(err)
	}
	res := busCommand(t, url, "send-message", "--topic", "jobs:1", "--payload", `{"type":"task_request","text":"survive"}`).must(t, 0)
	var sr bus.SendResult
	if err := json.Unmarshal([]byte(res.stdout), &sr); err != nil || len(sr.Acks) != 1 || !sr.Acks[0].Retrying {
		t.Fatalf("ack %q (%v): want one ack, retrying", res.stdout, err)
	}
	_ = busy.Close()
	rl.signal(t, syscall.SIGKILL)
	<-rl.exited

	// The same data directory and ws port: the worker comes back.
	rl2 := startCommand(t, "relay", "relay-restarted", "--data", dir, "--ws", rl.started.WS)
	worker := dialBusPeer(t, "ws://"+rl2.started.WS+"/", "worker", "jobs:*")
	wait.For(t, 30*time.Second, func() error {
		if worker.received() != "jobs:1=survive" {
			return fmt.Errorf("worker received %q after the restart", worker.received())
		}
		return nil
	})
	rl2.stop(t, 20*time.Second)
}
