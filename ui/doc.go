// Package ui serves a node's live status page at /ui: plain HTML, CSS
// and JavaScript embedded in the binary, with no build step and nothing
// fetched from elsewhere, so it works on a machine with no internet.
//
// The page is static. Everything it shows comes from the node's local
// API: the script opens a WebSocket to "/" on the host that served it,
// initializes (seed 001), and then polls mesh.status, mesh.connections,
// mesh.recentCalls and bus.deadLetters once a second. Polling rather
// than pushed notifications keeps the API as it is (no subscription
// state per page, nothing to replay after a reconnect) at the cost of
// four small requests a second per open page; a page left open on a
// node costs nothing when closed.
//
// The page is served beside the local API, so it follows the API's
// loopback rule; the API admits it as a browser client only with
// rpc.WithLoopbackPages, which accepts the origin of the listener's own
// loopback address and no other. The handler sets a strict Content
// Security Policy (scripts and connections to its own origin only) and
// forbids framing. The package imports nothing of the project.
package ui
