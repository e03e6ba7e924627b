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
	"syscall"
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
	return startSubscribe(t, api, "--durable", name, "--count", fmt.Sprint(count))
}

// startSubscribe starts `meshagent subscribe news:* ARGS...`.
func startSubscribe(t *testing.T, api string, args ...string) *durableSubscriber {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"subscribe", "news:*", "--api", api}, args...)...)
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

// until returns the messages printed up to and including {"n":last}.
func (s *durableSubscriber) until(t *testing.T, last int) []int {
	t.Helper()
	var out []int
	for len(out) == 0 || out[len(out)-1] != last {
		out = append(out, payloadN(t, s.take(t, 1)[0]))
	}
	return out
}

// kill SIGKILLs the process and returns what else it printed.
func (s *durableSubscriber) kill(t *testing.T) []int {
	t.Helper()
	_ = s.cmd.Process.Kill()
	return s.rest(t)
}

// rest waits for the process to exit and returns what else it printed.
func (s *durableSubscriber) rest(t *testing.T) []int {
	t.Helper()
	select {
	case err := <-s.done:
		s.done <- err
	case <-time.After(30 * time.Second):
		t.Fatal("subscribe did not exit")
	}
	var out []int
	for {
		select {
		case m := <-s.lines:
			out = append(out, payloadN(t, m))
		default:
			return out
		}
	}
}

// publishSeen publishes messages from to to-1, each once s printed the
// one before: live, one message in flight at a time.
func publishSeen(t *testing.T, api string, s *durableSubscriber, from, to int) []int {
	t.Helper()
	var out []int
	for i := from; i < to; i++ {
		publishNews(t, api, i, i+1)
		out = append(out, s.until(t, i)...)
	}
	return out
}

// TestDurableSubscribeKilled: `subscribe --durable` prints a message,
// then answers it, and the node moves the name's position only on the
// answer. A subscribe process SIGKILLed after printing message 3, with
// message 4 sent to it but not printed, and a subscriber node SIGKILLed
// just after its subscribe printed message 12 lose nothing: each next
// run prints, in order, from the message in flight at the kill (again,
// if its answer did not happen) or the one after it; after the node's
// kill, from the node's last saved position, which may be a few
// answers behind on a loaded machine.
func TestDurableSubscribeKilled(t *testing.T) {
	dir := t.TempDir()
	relay := startCommand(t, "relay", "keeper", "--data", filepath.Join(dir, "relay"), "--ws", "127.0.0.1:0", "--api", "127.0.0.1:0")
	boot := relay.started.Addrs[0]
	pub := startNode(t, "publisher", "--data", filepath.Join(dir, "pub"), "--bootstrap", boot)
	subData := filepath.Join(dir, "sub")
	sub := startNode(t, "subscriber", "--data", subData, "--bootstrap", boot)
	kept := keptCount(t, boot)
	keptAll := func(n int) {
		wait.For(t, 30*time.Second, func() error {
			k, err := kept()
			if err == nil && k < n {
				err = fmt.Errorf("the keeper has %d of %d", k, n)
			}
			return err
		})
	}

	// Run 1: live, stopped once it printed 3, and SIGKILLed once its
	// node has 4 (another subscriber there printed it): the node sent
	// run 1 message 4, which it never printed.
	run1 := startDurable(t, sub.started.API, "reader", 0)
	got1 := publishSeen(t, pub.started.API, run1, 0, 4)
	plain := startSubscribe(t, sub.started.API)
	if err := run1.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	publishNews(t, pub.started.API, 4, 5)
	plain.until(t, 4)
	got1 = append(got1, run1.kill(t)...)
	plain.kill(t)

	// Run 2: catches up on what was published while nobody read, goes
	// on live; its node is SIGKILLed once it printed 12.
	publishNews(t, pub.started.API, 5, 10)
	keptAll(10)
	run2 := startDurable(t, sub.started.API, "reader", 0)
	got2 := run2.until(t, 9)
	got2 = append(got2, publishSeen(t, pub.started.API, run2, 10, 13)...)
	_ = sub.cmd.Process.Kill()
	<-sub.exited
	got2 = append(got2, run2.rest(t)...)

	// Run 3, on the node started again on the same data: the catch-up
	// of what was published while the node was down, then live.
	publishNews(t, pub.started.API, 13, 18)
	keptAll(18)
	sub = startNode(t, "subscriber", "--data", subData, "--bootstrap", boot)
	run3 := startDurable(t, sub.started.API, "reader", 0)
	got3 := run3.until(t, 17)
	got3 = append(got3, publishSeen(t, pub.started.API, run3, 18, 20)...)
	got3 = append(got3, run3.kill(t)...)

	runs := [][]int{got1, got2, got3}
	t.Logf("printed by each run: %v", runs)
	for r, got := range runs {
		for i := 1; i < len(got); i++ {
			if got[i] != got[i-1]+1 {
				t.Errorf("run %d printed %v: out of order, a message lost or doubled", r+1, got)
				break
			}
		}
	}
	if len(got1) == 0 || got1[0] != 0 {
		t.Fatalf("run 1 printed %v, want from 0", got1)
	}
	// Run 2 starts with the message in flight when run 1 was killed, or
	// the next: its node lived on and saved the position of every answer.
	// Run 3 follows a node killed mid-stream, whose saves run behind its
	// deliveries (one at a time, whenever the position moved): it starts
	// at most one past run 2's last (nothing lost) and not before run
	// 2's first (what it repeats is what run 2 answered since the
	// node's last save).
	for r := 1; r < len(runs); r++ {
		prev, got := runs[r-1], runs[r]
		last, earliest := prev[len(prev)-1], prev[len(prev)-1]
		if r == 2 {
			earliest = prev[0]
		}
		if len(got) == 0 || got[0] < earliest || got[0] > last+1 {
			t.Errorf("run %d printed %v after run %d printed %v: want it to start from %d to %d", r+1, got, r, prev, earliest, last+1)
		}
	}
	if last := got3[len(got3)-1]; last != 19 {
		t.Errorf("the last run ended with %d, want 19", last)
	}
}
