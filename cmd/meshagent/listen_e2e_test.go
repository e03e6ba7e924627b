package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestListenPortInUse: a second node on a TCP port another node holds must
// not start (SO_REUSEPORT used to let both bind); it exits non-zero and
// says which address is in use.
func TestListenPortInUse(t *testing.T) {
	dir := t.TempDir()
	first := startNode(t, "first", "--key", filepath.Join(dir, "a.key"), "--data", filepath.Join(dir, "a"))
	held, _, _ := strings.Cut(first.started.Addrs[0], "/p2p/")
	if !strings.Contains(held, "/tcp/") {
		t.Fatalf("first node's address %s is not TCP", held)
	}
	r := meshagent(t, "node", "--no-mdns", "--key", filepath.Join(dir, "b.key"), "--data", filepath.Join(dir, "b"),
		"--api", "127.0.0.1:0", "--listen", held)
	if r.code == 0 {
		t.Fatalf("a second node started on %s, held by the first\nstderr: %s", held, r.stderr)
	}
	if !strings.Contains(r.stderr, held) || !strings.Contains(r.stderr, "address already in use") {
		t.Fatalf("exit %d; stderr does not name %s as in use:\n%s", r.code, held, r.stderr)
	}
}
