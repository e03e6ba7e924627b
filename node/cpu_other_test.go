//go:build !unix

package node_test

import "time"

// processCPU is zero where the process's CPU time is not at hand; the
// benchmarks then report no CPU figure.
func processCPU() time.Duration { return 0 }
