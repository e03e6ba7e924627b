//go:build unix

package relay_test

import (
	"net"
	"syscall"
)

// smallReceiveBuffer makes a dialer whose sockets have a small, fixed
// receive buffer (no autotuning, which on loopback grows to tens of MiB),
// so that a client that stops reading stalls the server's writes after
// little data.
func smallReceiveBuffer() *net.Dialer {
	return &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		if err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 16<<10)
		}); err != nil {
			return err
		}
		return serr
	}}
}
