// Package fakemesh is the mesh that the tests of the WebSocket listeners
// (rpc, bus, lobby) talk to: a node with a fixed agent id that answers
// calls at once, without any network. Mesh answers as the capability
// named tells it to, for tests that check what a listener makes of each
// kind of answer; Instant answers everything successfully, for the fuzz
// targets. Only tests import it.
package fakemesh
