//go:build linux

package smallfs

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// Mount mounts a tmpfs of size (mount's spelling: "8m") on a temporary
// directory for the test, unmounted when it ends, and returns the
// directory. It skips the test when not run as root or when the mount
// fails.
func Mount(t testing.TB, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("needs root to mount a %s tmpfs (mount -t tmpfs -o size=%s)", size, size)
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// Fill writes to path until its filesystem is full (the write fails with
// ENOSPC). Removing path gives the space back.
func Fill(t testing.TB, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			break
		}
	}
	// The last blocks: a smaller write may still fit.
	for _, n := range []int{4 << 10, 512} {
		for {
			if _, err := f.Write(buf[:n]); err != nil {
				break
			}
		}
	}
}
