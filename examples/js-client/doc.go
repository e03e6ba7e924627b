// Package jsclient holds the end-to-end test of client.js, a seed 001 bus
// client in JavaScript on the meshagent-client package (clients/js): the test starts a
// node's bus in-process on loopback, runs the script against it, and
// checks both directions (the script's message acknowledged by a Go
// subscriber, and a message to the script's subscription printed by it).
package jsclient
