//go:build unix

package wait

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ProcessEnded is a condition for For: it returns an error while process
// pid runs. A zombie, ended and waiting for whoever adopted it to reap it,
// counts as ended where /proc tells them apart.
func ProcessEnded(pid int) error {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return nil
	}
	if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		// The state follows the command name's closing parenthesis.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && (stat[i+2] == 'Z' || stat[i+2] == 'X') {
			return nil
		}
	}
	return fmt.Errorf("process %d still runs", pid)
}

// ForPID waits until the file at path holds a process id and a newline,
// as a process a test started writes its own (the newline tells a whole
// id from one half written), and returns it, failing tb if that has not
// happened within d. A process still running when the test ends is
// killed, so that a failed test leaves no orphan.
func ForPID(tb testing.TB, d time.Duration, path string) int {
	tb.Helper()
	var pid int
	For(tb, d, func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.HasSuffix(b, []byte("\n")) {
			return fmt.Errorf("%s holds %q, not yet a whole line", path, b)
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err
	})
	tb.Cleanup(func() {
		if ProcessEnded(pid) != nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return pid
}
