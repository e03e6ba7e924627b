//go:build unix

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/internal/p2ptest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/pubsub"
	"github.com/meshagent/meshagent/sign"
)

// durableSubscriber is a `meshagent subscribe --durable` process whose
// lines are read as they come.
type durableSubscriber struct {
	cmd   *exec.Cmd
	lines chan protocol.TopicMessage
	done  chan error
}

func startDurable(t *testing.T, api, name string, count int) *durableSubscriber {
	t.Helper()
	cmd := exec.Command(binary, "subscribe", "news:*", "--durable", name, "--count", fmt.Sprint(count), "--api", api)
	cmd.Env = env(t)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &durableSubscriber{cmd: cmd, lines: make(chan protocol.TopicMessage, 1024), done: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var m protocol.TopicMessage
			if err := json.Unmarshal(sc.Bytes(), &m); err == nil {
				s.lines <- m
			}
		}
		_, _ = io.Copy(io.Discard, out)
		err := cmd.Wait()
		if err != nil {
			err = fmt.Errorf("%w: %s", err, stderr.String())
		}
		s.done <- err
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	wait.For(t, 30*time.Second, func() error {
		if !strings.Contains(stderr.String(), "subscribed") {
			return fmt.Errorf("not subscribed yet: %s", stderr.String())
		}
		return nil
	})
	return s
}

// take returns the next n messages.
func (s *durableSubscriber) take(t *testing.T, n int) []protocol.TopicMessage {
	t.Helper()
	var out []protocol.TopicMessage
	for len(out) < n {
		select {
		case m := <-s.lines:
			out = append(out, m)
		case err := <-s.done:
			s.done <- err // for end
			// The lines it printed before it exited come first.
			for len(out) < n {
				select {
				case m := <-s.lines:
					out = append(out, m)
					continue
				default:
				}
				t.Fatalf("subscribe ended after %d of %d messages: %v", len(out), n, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d messages", len(out), n)
		}
	}
	return out
}

// end waits for the command to exit on its own (--count reached).
func (s *durableSubscriber) end(t *testing.T) {
	t.Helper()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("subscribe: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("subscribe did not exit after --count messages")
	}
}

func publishNews(t *testing.T, api string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		meshagent(t, "publish", fmt.Sprintf("news:%d", i%3), "--payload", fmt.Sprintf(`{"n":%d}`, i), "--timeout", "10s", "--api", api).must(t, 0)
	}
}

// keptCount asks the keeper at addr, as a durable subscriber's node would,
// how many news messages it holds.
func keptCount(t *testing.T, keeper string) func() (int, error) {
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
	return func() (int, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Connect(ctx, *ai); err != nil {
			return 0, err
		}
		msgs, _, err := topics.FetchHistory(ctx, "news:*", time.Time{})
		return len(msgs), err
	}
}

func payloadN(t *testing.T, m protocol.TopicMessage) int {
	t.Helper()
	var p struct{ N int }
	if err := json.Unmarshal(m.Payload, &p); err != nil {
		t.Fatalf("payload %s: %v", m.Payload, err)
	}
	return p.N
}

// TestDurableSubscribeAcrossRestart: a subscriber node whose durable
// subscription reads three messages goes down; twenty are published
// while it is down and the relay keeps them; started again on the same
// data, `subscribe --durable` under the same name prints those twenty in
// order, then the live ones, and nothing twice.
func TestDurableSubscribeAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	relay := startCommand(t, "relay", "keeper", "--data", filepath.Join(dir, "relay"), "--ws", "127.0.0.1:0", "--api", "127.0.0.1:0")
	boot := relay.started.Addrs[0]
	pub := startNode(t, "publisher", "--data", filepath.Join(dir, "pub"), "--bootstrap", boot)
	subData := filepath.Join(dir, "sub")
	sub := startNode(t, "subscriber", "--data", subData, "--bootstrap", boot)

	first := startDurable(t, sub.started.API, "reader", 3)
	publishNews(t, pub.started.API, 0, 3)
	got := first.take(t, 3)
	first.end(t)
	sub.stop(t, 20*time.Second)

	// Offline: published meanwhile; wait until the keeper has them all.
	publishNews(t, pub.started.API, 3, 23)
	kept := keptCount(t, boot)
	wait.For(t, 30*time.Second, func() error {
		n, err := kept()
		if err == nil && n < 23 {
			err = fmt.Errorf("the keeper has %d of 23", n)
		}
		return err
	})

	sub = startNode(t, "subscriber", "--data", subData, "--bootstrap", boot)
	second := startDurable(t, sub.started.API, "reader", 22)
	caught := second.take(t, 20)
	for i := 1; i < len(caught); i++ {
		a, b := caught[i-1], caught[i]
		if a.Time.After(b.Time) || a.Time.Equal(b.Time) && a.ID > b.ID {
			t.Errorf("catch-up out of order at %d: %s %s then %s %s", i, a.Time, a.ID, b.Time, b.ID)
		}
	}
	publishNews(t, pub.started.API, 23, 25)
	got = append(append(got, caught...), second.take(t, 2)...)
	second.end(t)
	seen := map[int]bool{}
	for _, m := range got {
		n := payloadN(t, m)
		if seen[n] {
			t.Errorf("message %d printed twice", n)
		}
		seen[n] = true
	}
	for i := range 25 {
		if !seen[i] {
			t.Errorf("message %d lost", i)
		}
	}
}
