// Package clients holds the tests of the client packages for other
// languages: python/ (meshagent_client, asyncio and websockets) and js/
// (meshagent-client, Node.js and ws). Each package's own unit tests run it
// against a fake node in its language, so that a client that drifts from
// the local API's spec fails; the Go tests here run those unit tests and
// drive two real node processes through each package, so that `go test
// ./...` covers them. There is no Go code to import here.
package clients
