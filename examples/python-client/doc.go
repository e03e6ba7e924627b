// Package pyclient holds the end-to-end test of client.py, a seed 001 bus
// client in Python on the meshagent_client package (clients/python): the
// test starts a node's bus in-process on loopback, runs the script against
// it with Debian's python3-websockets, and checks both directions (the
// script's message acknowledged by a Go subscriber, and a message to the
// script's subscription printed by it).
package pyclient
