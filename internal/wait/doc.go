// Package wait is how meshagent's tests wait: for a condition, with a
// deadline. A test never sleeps for the network to settle; it names what
// it waits for, re-checks it on a short ticker, and fails with the
// condition's last error when the deadline passes. It imports nothing of
// the project, so every package's tests can use it.
package wait
