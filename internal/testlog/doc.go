// Package testlog is the one logger meshagent's tests hand to the code
// they test: a *slog.Logger that writes to the test's own output, so a
// log line shows up next to the failure it explains (and only with -v or
// on failure, as go test shows test output).
//
// The level comes from the MESHAGENT_TEST_LOG environment variable
// (debug, info, warn, error, or slog's "info+2" forms); by default only
// errors are written, and "off" discards everything. The logger stops
// writing when the test ends: goroutines that outlive the test by a few
// instants (a connection draining in a Close) must not write to a
// finished test, which go test reports as a panic.
//
// It imports nothing of the project, so the tests of every package,
// including those below node, can use it.
package testlog
