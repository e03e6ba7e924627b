//go:build linux

package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// execChildDir tells the test binary, started again by
// TestExecHandlerDiesWithItsNode, to run a handler as a node would.
const execChildDir = "MESHAGENT_EXEC_CHILD_DIR"

// TestExecHandlerCancelKillsWhatItStarted: a handler that started a
// process of its own is killed with that process when its request is
// cancelled (a timeout cancels it the same way), not the handler alone.
func TestExecHandlerCancelKillsWhatItStarted(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	script := fmt.Sprintf(`sleep 300 & echo $! > %[1]s.tmp && mv %[1]s.tmp %[1]s; wait`, pidFile)
	h := node.ExecHandler([]string{"sh", "-c", script}, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := h.Handle(ctx, &node.Call{From: meshtest.ID(t, 1), Request: &protocol.Request{Action: "x", CorrelationID: "c", Params: json.RawMessage(`{}`)}})
		done <- err
	}()
	pid := wait.ForPID(t, 30*time.Second, pidFile)
	cancel()
	if err := wait.Receive(t, 30*time.Second, done, "the handler's answer"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled handler returned %v", err)
	}
	wait.For(t, 10*time.Second, func() error { return wait.ProcessEnded(pid) })
}

// TestExecHandlerDiesWithItsNode: a handler still running when its node
// is killed with SIGKILL dies too. An orphan would run on beside the run
// that a restarted node starts when it re-offers an idempotent task.
func TestExecHandlerDiesWithItsNode(t *testing.T) {
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestExecHandlerChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), execChildDir+"="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := wait.ForPID(t, 30*time.Second, filepath.Join(dir, "pid"))
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	wait.For(t, 10*time.Second, func() error { return wait.ProcessEnded(pid) })
}

// TestExecHandlerChild is the node of TestExecHandlerDiesWithItsNode: it
// runs a handler that never ends until it is killed.
func TestExecHandlerChild(t *testing.T) {
	dir := os.Getenv(execChildDir)
	if dir == "" {
		t.Skip("run by TestExecHandlerDiesWithItsNode")
	}
	// The loop also ends once the test's folder is removed, so a failure
	// leaves nothing running.
	script := fmt.Sprintf(`echo $$ > %[1]s/pid.tmp && mv %[1]s/pid.tmp %[1]s/pid; while [ -d %[1]s ]; do sleep 0.05; done`, dir)
	h := node.ExecHandler([]string{"sh", "-c", script}, time.Hour)
	_, err := h.Handle(context.Background(), &node.Call{From: meshtest.ID(t, 1), Request: &protocol.Request{Action: "x", CorrelationID: "c", Params: json.RawMessage(`{}`)}})
	t.Fatalf("the handler returned (%v) before its node was killed", err)
}
