//go:build linux

package mcp

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
)

// TestCommandServerDiesWithItsNode: an MCP server on stdio that does not
// end when its stdin closes still dies when the node that started it is
// killed with SIGKILL.
func TestCommandServerDiesWithItsNode(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pid")
	owner := exec.Command(os.Args[0], "-test.run=^$")
	owner.Env = append(os.Environ(), serverOwnerEnv+"=1", "MESHAGENT_TEST_MCP_SERVER=", stuckServerPIDFile+"="+pidFile)
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	pid := wait.ForPID(t, 30*time.Second, pidFile)
	if err := owner.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = owner.Wait()
	wait.For(t, 10*time.Second, func() error { return wait.ProcessEnded(pid) })
}
