// Package fakemesh is the mesh that the tests of the WebSocket listeners
// (rpc, bus, lobby) talk to: a node with a fixed agent id that answers
// calls at once, without any network, as the capability named tells it
// to. Only tests import it.
package fakemesh
