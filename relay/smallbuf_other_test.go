//go:build !unix

package relay_test

import "net"

// smallReceiveBuffer is a plain dialer where socket options are not set
// the unix way.
func smallReceiveBuffer() *net.Dialer { return &net.Dialer{} }
