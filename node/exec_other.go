//go:build !linux

package node

import "os/exec"

// tieToNode leaves the handler as exec.CommandContext starts it: outside
// Linux there is no parent-death signal, so a handler outlives a node that
// is killed with SIGKILL.
func tieToNode(*exec.Cmd) {}
