//go:build unix

package main

import (
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
)

// TestOutboxAcrossRestarts: a message for an agent whose node was killed
// (SIGKILL) is queued in the sending node's outbox; the sending node
// restarts; when the agent's node comes back, the message reaches it,
// once.
func TestOutboxAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	keyS, keyR := filepath.Join(dir, "s.key"), filepath.Join(dir, "r.key")
	got := filepath.Join(dir, "received.jsonl")
	caps := filepath.Join(dir, "caps.json")
	writeFile(t, caps, `[{"name": "note", "description": "keeps a note",
		"handler": {"exec": ["sh", "-c", "tee -a '`+got+`'; echo >> '`+got+`'"], "timeout": "10s"}}]`)
	sender := startNode(t, "sender", "--key", keyS, "--data", filepath.Join(dir, "s"))
	recipient := startNode(t, "recipient", "--key", keyR, "--data", filepath.Join(dir, "r"), "--capabilities", caps, "--bootstrap", sender.started.Addrs[0])
	idR := recipient.started.AgentID
	wait.For(t, 30*time.Second, func() error {
		if !sender.logged("msg=hello", "remote_peer="+idR) {
			return errors.New("the sender has no hello from the recipient")
		}
		return nil
	})

	recipient.signal(t, syscall.SIGKILL)
	<-recipient.exited
	wait.For(t, 30*time.Second, func() error {
		res := meshagent(t, "peers", "--json", "--api", sender.started.API)
		var peers []peerInfo
		if err := json.Unmarshal([]byte(res.stdout), &peers); err != nil {
			return fmt.Errorf("peers --json %q: %v", res.stdout, err)
		}
		for _, p := range peers {
			if p.AgentID == idR && p.Connected {
				return errors.New("the sender still holds a connection to the killed recipient")
			}
		}
		return nil
	})

	res := meshagent(t, "send-message", "--bus", "ws://"+sender.started.API+"/", "--topic", "agent:"+idR,
		"--payload", `{"type":"note","text":"while you were out"}`).must(t, 0)
	if !strings.Contains(res.stdout, `"queued":true`) || !strings.Contains(res.stderr, "queued in the node's outbox") {
		t.Fatalf("send-message did not say queued:\nstdout: %s\nstderr: %s", res.stdout, res.stderr)
	}

	sender.stop(t, 30*time.Second)
	sender = startNode(t, "sender", "--key", keyS, "--data", filepath.Join(dir, "s"))
	startNode(t, "recipient", "--key", keyR, "--data", filepath.Join(dir, "r"), "--capabilities", caps, "--bootstrap", sender.started.Addrs[0])
	wait.For(t, 60*time.Second, func() error {
		b, err := os.ReadFile(got)
		if err != nil {
			return err
		}
		if n := strings.Count(string(b), "while you were out"); n != 1 {
			return fmt.Errorf("the recipient has the message %d times", n)
		}
		return nil
	})
	dlq := meshagent(t, "dlq", "list", "--json", "--bus", "ws://"+sender.started.API+"/").must(t, 0)
	if strings.TrimSpace(dlq.stdout) != "" {
		t.Errorf("dead letters after delivery: %s", dlq.stdout)
	}
}
