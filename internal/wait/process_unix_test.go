//go:build unix

package wait_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

func TestProcessEnded(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if wait.ProcessEnded(pid) == nil {
		t.Fatal("a running process counted as ended")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/proc/self/stat"); err == nil {
		// Killed but not yet reaped: a zombie has ended.
		wait.For(t, 10*time.Second, func() error { return wait.ProcessEnded(pid) })
	}
	_ = cmd.Wait()
	if err := wait.ProcessEnded(pid); err != nil {
		t.Fatalf("after Wait: %v", err)
	}
}

// TestForPID: the pid a process wrote is read once it is there, and the
// process is killed when the test that waited for it ends.
func TestForPID(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	defer func() { _ = cmd.Process.Kill(); <-exited }()
	go func() { exited <- cmd.Wait() }()
	path := filepath.Join(t.TempDir(), "pid")
	t.Run("wait", func(t *testing.T) {
		go func() { _ = os.WriteFile(path, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600) }()
		if pid := wait.ForPID(t, 10*time.Second, path); pid != cmd.Process.Pid {
			t.Fatalf("pid %d, want %d", pid, cmd.Process.Pid)
		}
	})
	err := wait.Receive(t, 10*time.Second, exited, "the end of the process")
	exited <- err // for the deferred wait
	if err == nil {
		t.Fatal("the process ended by itself; it should have been killed")
	}
}
