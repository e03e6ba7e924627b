//go:build !linux

package childproc

import "os/exec"

// Tie leaves cmd as exec.CommandContext starts it: outside Linux there is
// no parent-death signal, so cmd outlives a process killed with SIGKILL.
func Tie(*exec.Cmd) {}
