//go:build unix

package wait_test

import (
	"os"
	"os/exec"
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
