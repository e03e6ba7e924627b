//go:build unix

package wait

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
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
