// Package relay serves meshagent's JSON-RPC 2.0 API over WebSocket: the
// local API every node offers on loopback, and the endpoint a relay node
// offers to remote clients. The seed 001 message bus (initialize,
// subscribe, sendMessage, processMessage) and the seed 000 lobby (at
// "/lobby") are hosted on the same server. The package also holds the Go
// client the command line uses.
//
// This package is not libp2p's circuit relay. That is a libp2p transport
// service, which the relay command switches on separately; the two share
// only a name.
//
// relay sees the mesh through the Mesh interface, built from protocol
// types, so it never imports the node and its tests need no libp2p.
//
// # Serving
//
//	srv, err := relay.New(n) // n is a relay.Mesh; *node.Node is one
//	if err != nil { … }
//	defer srv.Close()
//	if err := srv.Start("127.0.0.1:7892"); err != nil { … }
//
// A Server is also an http.Handler (API at "/"), for mounting in another
// HTTP server.
//
// # Protocol
//
// JSON-RPC 2.0 exactly. One WebSocket message carries one request,
// notification or response, or one batch of them. Notifications get no
// response; a batch gets one array holding the responses to its requests
// in order, or nothing if it holds none; an empty batch gets a single
// -32600 error; a frame that is not JSON gets -32700 with id null. A
// malformed message is answered on its own connection and disturbs no
// other client. "params": null is read as absent. Every error code is
// listed in one table in errors.go.
//
// Methods served by every server:
//
//	ping        {}  -> {"timestamp": "2025-02-14T12:00:00Z"}   (seed 001)
//	mesh.id     {}  -> {"agentId": "12D3KooW…"}
//	mesh.peers  {}  -> [PeerInfo, …]
//	mesh.call   {"agentId", "capability" (alias "action"), "params"?, "timeoutMs"?}
//	            -> {"correlationId", "status", "result"}
//
// While a mesh.call runs, each in_progress response is sent to the caller
// as a notification, before the call's final response:
//
//	{"jsonrpc":"2.0","method":"mesh.progress",
//	 "params":{"requestId":<the call's id>,"response":{"correlationId":…,"result":…,"status":"in_progress"}}}
//
// An AgentProtocol error from the mesh becomes the JSON-RPC error of its
// code (-32010…-32017) with data {"code": "UNAUTHORIZED", "details": …};
// Client.MeshCall turns it back into a *protocol.Error.
//
// The seed 001 bus (bus.go; seed 001 is followed where it is exact and its
// loose parts are read as DESIGN.md settles them):
//
//	initialize   {"clientId", "clientInfo": {"name", "version"}} -> {"serverId", "serverInfo", "capabilities"}
//	subscribe    {"topic", "policy"?, "defaultHandler"?} -> {"success": true}
//	unsubscribe  {"topic", "defaultHandler"?} -> {"success": true}
//	sendMessage  {"topic", "payload"} -> {"success", "stopPropagation", "acks", "messageId"}
//	bus.history, bus.deadLetters, bus.replay   (need a store: WithStore)
//
// initialize comes first, on every listener (seed 001: the server rejects
// non-initialize requests until the handshake completes): before it every
// other method, ping and mesh.* included, is answered -32006 and a
// notification is dropped. Dial initializes by itself, so Go clients and
// the CLI need do nothing. A clientId held by a live connection is
// refused to another one (-32001, data {"reason":"clientIdInUse"}),
// unless both present the same credential: then the new connection
// replaces the old one, which is closed (a client reconnecting before the
// relay noticed its old connection died is not locked out). The local API
// has no credentials, so there an id is never taken over.
// The bus delivers with processMessage (sendMessage to a client that
// answers processMessage with -32601), newest matching subscription first,
// skipping subscriptions shadowed by a newer one to the same pattern, and
// stops as each subscription's policy says. Failed or should_retry
// deliveries go to the store's outbox before sendMessage answers, are
// retried with backoff, and become dead letters after BusConfig.MaxAttempts
// deliveries. A retry that finds its client id away does not count: the
// message waits (subscribe wakes it) until BusConfig.MessageTTL, then is a
// dead letter. The retry loop sleeps until the next retry is due.
// A default handler (subscribe with "defaultHandler": true) takes local
// messages nobody subscribes to; its should_retry routes the message
// afresh. agent:<mesh agent id> becomes a mesh call; other topics are
// published on the mesh when the Mesh is a Publisher, and mesh messages
// reach local subscribers (never a default handler: every node would take
// them), those this node publishes by other ways than the bus
// (mesh.publish, Node.Publish) included. Each mesh message is dispatched
// once, however many local patterns match it; the bus publishes its own
// with IDPublisher.PublishID and knows them when they come back.
//
// # Listeners and credentials
//
// One Server holds one bus and one retry loop over its store, whichever
// listeners serve it: the local API (ServeHTTP, Serve, Start; every
// method, meant for loopback) and a relay's public listener
// (PublicHandler). A public listener serves anyone initialize, ping,
// subscribe, unsubscribe and sendMessage; every other method (bus.history,
// bus.deadLetters, bus.replay, mesh.*), and sendMessage to agent:<mesh
// agent id> (a mesh call made as the relay), needs a credential that
// grants it, and is otherwise answered CodeForbidden (-32020).
//
// Tokens (a tokens file, ParseTokens) map bearer tokens to credentials: a
// name, topic patterns and granted methods ("admin" for the three bus.*
// methods, names, or patterns such as "mesh.*"). Tokens.Middleware in
// front of a public listener requires one on every upgrade, from the URL
// query (?token=) or an Authorization: Bearer header, and answers 401
// otherwise; only SHA-256 digests are kept, compared in constant time. A
// credential's topics bound what it sends on and subscribes to (a
// subscription pattern must be provably narrower than an allowed one).
// Tokens.Reload applies to live connections on their next request: a
// removed token's connection is closed ("credential revoked"). Conn.Credential
// and CredentialFromContext give the client's name to the rest of the
// relay.
//
// # Server-initiated messages
//
// A handler (HandlerFunc, registered with Server.Handle) receives the
// client's *Conn. Conn.Notify pushes a notification and Conn.Call sends a
// request and waits for the client's response, which arrives on the same
// connection as the client's own requests. Per-connection state lives in
// Conn.SetValue, and Conn.AfterClose runs clean-up once the connection
// has ended. This is the path seed 001's processMessage takes.
//
// # Limits and slow clients
//
// Each connection has a read limit (an oversize message closes that
// connection with status 1009), a bounded send queue, a write timeout,
// keep-alive pings, a cap on concurrent requests (beyond it: -32005) and
// on batch size. A client whose queue fills or whose writes time out is
// disconnected, never waited for, so one slow client cannot stall the
// server or other clients. See Limits.
//
// # Browsers
//
// Clients that send no Origin header (programs) are always accepted.
// Browser pages are refused unless their origin matches a pattern given
// with WithOriginPatterns: a node's loopback API must not be drivable by
// any web page the user opens.
//
// # Goroutines
//
// Every goroutine the server starts is stopped by Server.Close, which
// waits for them; the same holds for Client.Close.
package relay
