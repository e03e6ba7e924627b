// Package rpctest builds the rpc.Server that tests talk to: with the test
// logger, optionally with a bus on it (as a node's local API serves
// them), served on a loopback port and closed when the test ends; and the
// clients that talk to it, the Go client or a raw WebSocket that has been
// through initialize (seed 001 serves nothing before it).
//
// It is the one way the tests of rpc, bus, cli, cmd/meshagent and the
// examples build a local API server, so that a change to how one is put
// together is made here once; with a bus it is daemon.NewBusServer, the
// pair a running node serves. It imports rpc, bus and daemon, so only
// external test packages of what daemon imports can use it (in-package
// tests build what they need from fakemesh and wstest). Only tests import
// it.
package rpctest
