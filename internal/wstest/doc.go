// Package wstest is the raw WebSocket client of the listeners' tests
// (rpc, bus, lobby) and of their whole-path fuzz targets: tests that must
// send exact frames, or bytes no client library would, and read exactly
// what the server answers. Every call fails its test instead of returning
// an error, and every wait is bounded by Timeout, so a silent server
// fails the test rather than hanging it.
//
// It speaks WebSocket only, not JSON-RPC nor seed 000, and imports
// nothing of the project, so the tests of every listener, including the
// in-package tests and fuzz targets of rpc and bus, can use it. Only tests
// import it.
package wstest
