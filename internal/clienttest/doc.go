// Package clienttest is the end-to-end exchange every example bus client
// in another language (examples/js-client, examples/python-client) is
// tested by: a node's local API with a bus, started in-process on
// loopback; a Go peer subscribed to outbound:*; the script under test,
// which subscribes, sends a message on outbound:42 and prints what it
// sees. Run checks both directions (the script's message acknowledged by
// the Go peer, and a message to the script's subscription printed and
// acknowledged by it), so that each example's test says only how to start
// its script. Only tests import it.
package clienttest
