// Package relay serves meshagent's JSON-RPC 2.0 API over WebSocket: the
// local API every node offers on loopback, and (in a later release) the seed
// 001 message bus and seed 000 lobby that a relay node offers to remote
// clients. It is not libp2p's circuit relay, which is a transport service
// the relay command switches on separately.
//
// # Usage
//
//	srv, err := relay.New(n) // n satisfies relay.Mesh; *node.Node does
//	go srv.Serve(listener)
//	defer srv.Close()
//
// A client:
//
//	c, err := relay.Dial(ctx, "ws://127.0.0.1:7892/")
//	resp, err := c.MeshCall(ctx, protocol.CallRequest{To: id, Action: "echo"}, nil)
//
// # Protocol
//
// JSON-RPC 2.0 exactly: requests, notifications (no response), batches
// (an empty batch is one -32600 error; a batch of notifications gets no
// response), -32700 for unparsable frames with id null. One WebSocket text
// or binary message carries one request or one batch. Methods:
//
//	ping          -> {"timestamp": RFC 3339}           (seed 001)
//	mesh.id       -> {"agentId": "12D3KooW…"}
//	mesh.peers    -> [PeerInfo…]
//	mesh.call     {"agentId","capability"|"action","params","timeoutMs"}
//	              -> {"correlationId","status","result"}
//
// While a mesh.call runs, each in_progress response is sent to the caller
// as a notification "mesh.progress" {"requestId": <call id>, "response":
// {…}} before the final result. The mesh.* methods are meshagent
// extensions and do not need seed 001's initialize handshake.
//
// # Errors
//
// Codes are listed in errors.go. An AgentProtocol error from the mesh
// becomes a JSON-RPC error whose data is {"code": "<AgentProtocol code>",
// "details": …}; the client turns it back into a *protocol.Error.
//
// # Limits and slow clients
//
// Every connection has a read limit (Limits.MaxMessageBytes), a bounded
// send queue and a write timeout. A client whose queue overflows or whose
// writes time out is disconnected, never waited for, so one slow client
// cannot stall the others. Calls per connection run concurrently up to
// Limits.MaxConcurrentCalls; beyond that the server answers -32005.
package relay
