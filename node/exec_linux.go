//go:build linux

package node

import (
	"os/exec"
	"syscall"
)

// tieToNode runs a handler in its own process group and asks the kernel to
// kill it when the node dies. A node killed with SIGKILL (or crashing)
// cannot cancel its handlers; without the parent-death signal they would
// run on, and a restarted node that re-offers an idempotent task would run
// it beside the orphan. The signal follows the OS thread that started the
// handler, which the Go runtime keeps for the life of the process unless a
// goroutine locked to it exits; nothing in meshagent does that.
//
// A timeout or a cancellation kills the whole group, so what the handler
// started goes with it. Only the handler itself gets the parent-death
// signal: a handler whose children must not outlive a killed node should
// end them itself, or run the node under systemd, which kills the unit's
// whole control group.
func tieToNode(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		// The group's id is the handler's pid (Setpgid with Pgid 0).
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
