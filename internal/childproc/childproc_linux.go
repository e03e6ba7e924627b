//go:build linux

package childproc

import (
	"os/exec"
	"syscall"
)

// Tie makes cmd, not yet started, run in its own process group and die with
// this process. A cancellation of cmd's context kills the whole group.
//
// The parent-death signal follows the OS thread that starts cmd, which
// the Go runtime keeps for the life of the process unless a goroutine
// locked to it exits; nothing in meshagent does that. Only cmd itself gets
// the signal: what it started must end itself, or the process must run
// under systemd, which kills the unit's whole control group.
func Tie(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		// The group's id is cmd's pid (Setpgid with Pgid 0).
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}
