// Package p2ptest holds the libp2p test helpers that packages below node
// (dht, pubsub) share with node's own tests: a plain loopback host and the
// goroutine-leak check with libp2p's process-wide workers ignored. It
// imports nothing of the project, so it creates no import cycle.
package p2ptest
