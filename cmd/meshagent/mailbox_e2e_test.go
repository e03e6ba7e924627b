//go:build unix

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/rpc"
)

// TestMailboxE2E: a mailbox relay delivers between two agents never
// online together. B names relay R as its mailbox (--mailbox) and is
// killed; A, which saw B's hello, sends B a direct message: A's node
// deposits it at R; A is killed; B comes back, fetches it from R and
// processes it once.
func TestMailboxE2E(t *testing.T) {
	dir := t.TempDir()
	relay := startCommand(t, "relay", "relay", "--data", filepath.Join(dir, "relay"), "--ws", "127.0.0.1:0")
	mbox := relay.started.Addrs[0]
	keyB := filepath.Join(dir, "b.key")
	b := startNode(t, "b", "--key", keyB, "--data", filepath.Join(dir, "b"), "--mailbox", mbox)
	idB := b.started.AgentID
	a := startNode(t, "a", "--data", filepath.Join(dir, "a"), "--bootstrap", b.started.Addrs[0])
	wait.For(t, 30*time.Second, func() error {
		if !a.logged("msg=hello", "remote_peer="+idB) {
			return errors.New("A has no hello from B")
		}
		// The relay holds mail only for an agent that named it.
		if !relay.logged("msg=hello", "remote_peer="+idB) {
			return errors.New("the relay has no hello from B")
		}
		return nil
	})

	b.signal(t, syscall.SIGKILL)
	<-b.exited
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, a.started.API)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var res json.RawMessage
	msg := map[string]any{"message_id": "mbx-e2e-1", "subject": "while you were away", "body": "see you"}
	wait.For(t, 30*time.Second, func() error {
		// Until A's node sees B gone: a send while the dead connection
		// lingers fails as undelivered, and is sent again (same id).
		err := cl.Call(ctx, "mesh.sendMessage", map[string]any{"agentId": idB, "message": msg}, &res)
		if err != nil {
			return err
		}
		if !strings.Contains(string(res), `"queued":true`) {
			return fmt.Errorf("answer %s", res)
		}
		return nil
	})
	wait.For(t, 30*time.Second, func() error {
		if !a.logged("message handed over to a mailbox", "mailbox="+relay.started.AgentID) {
			return errors.New("A has not handed the message over to B's mailbox")
		}
		return nil
	})
	a.signal(t, syscall.SIGKILL)
	<-a.exited

	b = startNode(t, "b", "--key", keyB, "--data", filepath.Join(dir, "b"), "--mailbox", mbox)
	wait.For(t, 30*time.Second, func() error {
		if !b.logged("msg=message", "message_id=mbx-e2e-1") {
			return errors.New("B has not processed the message")
		}
		return nil
	})
	wait.Holds(t, time.Second, func() error {
		if n := strings.Count(b.stderr.String(), "message_id=mbx-e2e-1"); n != 1 {
			return fmt.Errorf("B logged the message %d times", n)
		}
		return nil
	})
}

// TestMailboxBusE2E: a bus message to agent:<id> reaches its agent
// through the agent's mailbox after the relay that took it is gone. B
// names relay M as its mailbox, serves "note" and is killed; `meshagent
// send-message --topic agent:<B>` through relay S is acknowledged as
// queued and S deposits the call at M; S is killed (SIGKILL) before B
// returns; B comes back, fetches the call from M and handles it once.
func TestMailboxBusE2E(t *testing.T) {
	dir := t.TempDir()
	got := filepath.Join(dir, "received.jsonl")
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[{"name": "note", "description": "keeps a note",
		"handler": {"exec": ["sh", "-c", "tee -a '`+got+`'; echo >> '`+got+`'"], "timeout": "10s"}}]`)
	m := startCommand(t, "relay", "mailbox", "--data", filepath.Join(dir, "m"), "--ws", "127.0.0.1:0")
	mbox := m.started.Addrs[0]
	s := startCommand(t, "relay", "sender-relay", "--data", filepath.Join(dir, "s"), "--ws", "127.0.0.1:0")
	keyB := filepath.Join(dir, "b.key")
	bArgs := []string{"--key", keyB, "--data", filepath.Join(dir, "b"), "--mailbox", mbox, "--capabilities", caps}
	b := startNode(t, "b", append(bArgs, "--bootstrap", s.started.Addrs[0])...)
	idB := b.started.AgentID
	wait.For(t, 30*time.Second, func() error {
		if !s.logged("msg=hello", "remote_peer="+idB) {
			return errors.New("S has no hello from B")
		}
		// M holds mail only for an agent that named it (its hello,
		// noted before it is logged): B must have told M before it goes.
		if !m.logged("msg=hello", "remote_peer="+idB) {
			return errors.New("M has no hello from B")
		}
		return nil
	})

	b.signal(t, syscall.SIGKILL)
	<-b.exited
	wait.For(t, 30*time.Second, func() error {
		// Until S sees B gone: a send while the dead connection lingers
		// is not queued.
		res := meshagent(t, "send-message", "--bus", "ws://"+s.started.API+"/", "--topic", "agent:"+idB,
			"--payload", `{"type":"note","text":"while you were out"}`)
		if res.code != 0 || !strings.Contains(res.stdout, `"queued":true`) {
			return fmt.Errorf("send-message exit %d:\nstdout: %s\nstderr: %s", res.code, res.stdout, res.stderr)
		}
		return nil
	})
	wait.For(t, 30*time.Second, func() error {
		if !s.logged("message handed over to a mailbox", "mailbox="+m.started.AgentID) {
			return errors.New("S has not handed the message over to B's mailbox")
		}
		return nil
	})
	s.signal(t, syscall.SIGKILL)
	<-s.exited

	startNode(t, "b", bArgs...)
	wait.For(t, 30*time.Second, func() error {
		b, err := os.ReadFile(got)
		if err != nil {
			return err
		}
		if n := strings.Count(string(b), "while you were out"); n != 1 {
			return fmt.Errorf("B has handled the message %d times", n)
		}
		return nil
	})
	wait.Holds(t, time.Second, func() error {
		b, err := os.ReadFile(got)
		if err != nil {
			return err
		}
		if n := strings.Count(string(b), "while you were out"); n != 1 {
			return fmt.Errorf("B has handled the message %d times", n)
		}
		return nil
	})
}
