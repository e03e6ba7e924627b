// Package rpc serves meshagent's JSON-RPC 2.0 API over WebSocket: the
// local API every node offers on loopback (the mesh.* methods), and the
// endpoint a relay node offers to remote clients. It also holds the Go
// client the command line uses. Other services put their methods on the
// same Server with Handle (the seed 001 bus does; see "Hooks" below); rpc
// knows none of them.
//
// rpc sees the mesh through the Mesh interface, built from protocol
// types, so it never imports the node and its tests need no libp2p. The
// WebSocket plumbing (admission, send queue, pings, close) is
// internal/wsconn's.
//
// # Serving
//
//	srv, err := rpc.New(n, rpc.WithTopics(n), rpc.WithAnyCaller(n)) // n is an rpc.Mesh; *node.Node is one
//	if err != nil { … }
//	defer srv.Close()
//	if err := srv.Start("127.0.0.1:7892"); err != nil { … }
//
// A Server is also an http.Handler (API at "/"), for mounting in another
// HTTP server.
//
// What a server serves beyond Mesh is stated when it is built, each by
// an option taking a small interface, never found from the Mesh's type:
// WithTopics (Publisher: mesh.publish, mesh.subscribe, seed 004's
// broadcasts), WithDurables (DurableSubscriber: durable mesh.subscribe),
// WithAnyCaller (AnyCaller: mesh.call without "agentId"), WithProvider
// (Provider: mesh.serve and its kin) and WithControl (Control: the
// operator's methods). A server without one answers its methods as
// described with each below. daemon builds a node's servers with all the
// node offers; a bus-only server, or a test's fake mesh, with less.
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
// A method's params are decoded by protocol.DecodeStrict into its exported
// params struct (CallParams, PublishParams, …), which is the one statement
// of the members it takes: names exact, none unknown, none twice, every
// JSON type checked (DecodeMembers; DecodeParams, ObjectParams and
// NoParams for methods served from other packages). A member tagged ",required" must be present and not
// null. When several members are wrong, an unknown one is reported first.
// A seed 004 "filter" (mesh.publish, mesh.discover) is read in
// protocol.Filter's camelCase and in seed 004's snake_case ("persona_types",
// "exclude_agents", "include_agents", "required_capabilities"), each
// member in one spelling only; the mesh always carries protocol.Filter's.
//
// Methods served by every server:
//
//	ping        {}  -> {"timestamp": "2025-02-14T12:00:00Z"}   (seed 001)
//	mesh.id     {}  -> {"agentId": "12D3KooW…"}
//	mesh.peers  {}  -> [PeerInfo, …]
//	mesh.call   {"agentId", "capability" (alias "action"), "params"?, "timeoutMs"?, "taskId"?, "receipt"?}
//	            -> {"correlationId", "status", "result", "receipt"?}
//	mesh.call   {"capability", "params"?, "timeoutMs"?, "taskId"?, "receipt"?}   (no "agentId"; WithAnyCaller)
//	            -> {"correlationId", "status", "result", "agentId", "receipt"?}
//
// Without "agentId" the node chooses a provider of the capability and
// fails over to another only when the request provably did not start
// there, or the capability is idempotent (node.Node.CallAny); the result
// names the agent that answered. A server built without WithAnyCaller
// still requires "agentId" (-32602).
//
// With "receipt": true (either form; "taskId" is optional in both) the
// result also carries "receipt": the provider's final response envelope
// exactly as it signed it, in the embedded JSON form with "signature". It
// is a delivery receipt anyone can check later without the network or
// trust in this node (protocol.OpenReceipt, meshagent verify): signed by
// the provider, answering the call's correlationId. It is left out when
// not asked for, and the mesh keeps nothing then.
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
// Methods served from package localapi (localapi.Register), over the
// one interface it states of a node: mesh.audit, mesh.consensus,
// mesh.contextGet, mesh.contextSet, mesh.contextPatch, mesh.setStatus,
// mesh.discover, mesh.durables, mesh.forgetDurable, mesh.taskStatus,
// mesh.taskCancel, mesh.submit, mesh.taskWait and mesh.tasks; and, on the
// local API only, the operator's mesh.connections, mesh.recentCalls and
// mesh.taskResolve (localapi.RegisterOperator). Their names, params
// structs (ConsensusParams, ContextSetParams, DiscoverParams,
// SubmitParams, …), their readers (CheckAuditQuery, ParseDiscoverParams,
// ParseForgetDurableParams, ParseTaskResolveParams, MeshParamsError) and
// the Go client's calls stay here. Still served here: mesh.call (it
// vouches for the connection's credential and streams mesh.progress),
// mesh.subscribe and mesh.taskEvents (subscriptions held per
// connection), mesh.serve and its kin (capabilities served per
// connection), mesh.publish, and the operator's control.
//
// The seed 001 handshake, which rpc serves itself:
//
//	initialize   {"clientId", "clientInfo": {"name", "version"}} -> {"serverId", "serverInfo", "capabilities"}
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
//
// # Listeners and credentials
//
// One Server, with one set of methods, is served on every listener of a
// process: the local API (ServeHTTP, Serve, Start; every method, meant
// for loopback) and a relay's public listener (PublicHandler). A public
// listener serves anyone initialize, ping and the methods registered with
// HandlePublic (the bus's subscribe, unsubscribe and sendMessage); every
// other method (bus.history, mesh.*, …) needs a credential that grants
// it, and is otherwise answered CodeForbidden (-32020). A method checks
// the topics it is given against Conn.Credential itself (the bus refuses
// sendMessage to agent:<mesh agent id>, a mesh call made as the relay,
// to a credential without mesh.call).
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
// # Serving over the local API
//
// With a Provider (WithProvider; cli gives the node's), a node's local
// API clients, in any language, serve capabilities and exchange direct
// messages as the node's agent (the contract is the "Local API: serving"
// section of the client packages' READMEs):
//
//	mesh.serve        {"capabilities": [capability, …]}  -> {"serving": [names]}
//	mesh.unserve      {"capabilities": [names]}          -> {"serving": [names still served]}
//	mesh.handle       node -> client: {"taskId", "requester", "capability", "params", "correlationId", "deadline"}
//	mesh.progress     client -> node notification: {"taskId", "result"}
//	mesh.setState     client -> node notification: {"taskId", "state"}
//	mesh.cancel       node -> client notification: {"taskId"}
//	mesh.onMessage    {}  (this connection takes the node's direct messages)
//	mesh.agentMessage node -> client: {"from", "message": {seed 004 agent_message}}
//	mesh.sendMessage  {"agentId", "message"} -> {"messageId", "queued": false, "response"?}
//
// A capability object is seed 000's (plus "idempotent"), without a
// handler: the connection is the handler. The node offers the union of
// what its clients serve as one source of its services (node.Offer), so
// its hello and directory record carry them, and a request runs the
// node's checks (signature, ACL, policy, input schema, rate limits)
// before the Provider hands it to the server: a refused request never
// reaches a client. The server passes it to the connection serving the
// capability with the fewest requests in flight (the least recently
// picked of those) as mesh.handle. taskId names that hand-over; the
// client's mesh.progress and mesh.setState refer to it, and are served on
// the connection's read loop, so they reach the node in order and before
// the answer. The answer is the result (checked against output_schema by
// the node) or a JSON-RPC error whose data.code is an AgentProtocol code,
// which the requester gets as that error. When the requester cancels or
// the deadline passes, the client gets mesh.cancel and its late answer is
// dropped. Connections serving one capability must agree on its
// definition; a name the node offers itself is refused.
//
// When the last connection serving a capability goes away, the
// capability stays offered for the grace (WithServeGrace, 5 s by
// default): a client that reconnects (typically under the same clientId)
// and serves it again within it keeps it offered without a change of
// hello, and requests arriving meanwhile wait for it. Otherwise it is
// withdrawn and the waiting requests get CAPABILITY_NOT_SUPPORTED.
// mesh.unserve withdraws at once. Direct messages follow the same rules:
// connections that called mesh.onMessage share them, and the node's
// default handler is back after the grace once none is left.
//
// The node's message to the client is mesh.agentMessage because
// mesh.message already names the topic messages of mesh.subscribe. The node processes each (sender, message id) once, so a
// duplicate gets the first answer without reaching the client again.
// mesh.sendMessage uses the node's at-least-once delivery (retries, then
// the dead-letter queue); "queued": true says a message to an agent that
// is away waits in the node's outbox, on disk. When the outbox cannot
// write it (a full disk: ErrNotAccepted) the answer is -32005 naming the
// cause, and nothing is queued or acknowledged; the same send may succeed
// once the store writes again.
//
// A public listener's clients are refused these methods: what they
// served would be offered as the relay's own, which is the lobby's job.
//
// # Topics and durable subscriptions
//
// On a server built WithTopics (*node.Node is a Publisher), mesh.publish
// sends on a topic and mesh.subscribe {"pattern"} subscribes: each
// message then reaches the client as a mesh.message notification
// {"subscription", "message": {"topic", "from", "payload", "time",
// "id"}}, queued without waiting (a client that stops reading is
// disconnected as a slow consumer). Subscriptions end with the
// connection. Without WithTopics these methods, and seed 004's
// broadcasts, are answered -32601; without WithDurables a durable
// subscribe is answered -32602.
//
// mesh.subscribe {"pattern", "durable": NAME} (WithDurables) is
// acknowledged by the client instead. Each message is a mesh.message
// request with the same params, one at a time, in order: the node sends
// the next only once the client has answered, and moves NAME's position
// past a message only on its answer. The answer is any result ({} by
// convention) when the client has processed the message. A JSON-RPC
// error answer means it has not, and so does an answer of the message's
// id that is not a valid response (no "jsonrpc":"2.0", both or neither
// of result and error, an error whose code is not an integer or whose
// message not a string; answers of ids never sent, and repeats, are
// ignored): the subscription then delivers nothing
// more, and mesh.unsubscribe followed by mesh.subscribe under NAME
// delivers that message first, then the rest. A message left
// unanswered when the connection ends (the client crashed, was killed,
// or disconnected) comes again, first, on the next subscription of
// NAME. The guarantee is at least once, in order, across a SIGKILL of
// the client or of the node: a message is delivered again only if its
// answer, or the save of the position after it (a write to the node's
// store, made one at a time as answers come), did not happen; the
// repeat carries the same message id and from, by which a client can
// skip it. The node's wait for an answer lasts as long as the connection
// and the subscription; a stuck client holds up only its own
// subscription. The first message may arrive before the answer to
// mesh.subscribe; the clients hold it until they know the subscription
// id. A name is held by one subscription at a time: the node frees it
// when it sees the holder's connection end, which may come after the
// holder's close returned, so a client that reconnects at once may be
// refused (-32602, "is in use on this node") for that moment and tries
// again.
//
// A node keeps positions for a bounded number of names (256 for a
// node's store): mesh.subscribe under a new name past it is refused with
// -32602, as every refused durable name, saying to forget one first.
// mesh.forgetDurable {"durable": NAME} (served by localapi) drops
// NAME's position and answers {"durable", "forgotten"}, forgotten false
// when the node kept none; a name subscribed on the node is -32602.
// mesh.durables (no params; served by localapi) lists what fills the
// bound: {"durables": [{"name", "bytes", "active"}], "limit"}, the names
// sorted, bytes the size of each saved position, active true while a
// subscription of the name runs on the node (it must be unsubscribed
// before it can be forgotten), limit the most names the node keeps.
//
// # Hooks
//
// What a service on the server (the bus) may use: Handle and
// HandlePublic to register methods; Conn.ClientID, the clientId of the
// connection's initialize; Conn.Call, Conn.Notify, Conn.Context,
// Conn.AfterClose and per-connection values (Conn.LoadOrStoreValue);
// Conn.Public and Conn.Credential for a public listener's rules;
// Server.Now, the server's clock (WithClock); SetCapabilities, what
// initialize announces; OnStatus, to add to mesh.status; and Methods,
// the names of every method registered. Nothing else of the Server is
// reachable.
//
// # Limits and slow clients
//
// Each connection has a read limit (an oversize message closes that
// connection with status 1009), a bounded send queue, a write timeout,
// keep-alive pings, a cap on concurrent requests (beyond it: -32005) and
// on batch size. A client whose queue fills or whose writes time out is
// disconnected, never waited for, so one slow client cannot stall the
// server or other clients. See Limits. When the server is full, the
// oldest connection that has not initialized makes room for a new one.
//
// # The operator's methods
//
// With WithControl, for a node's loopback local API only, the server also
// serves mesh.status, mesh.capabilities (the node's own capability
// objects, schemas included, from Control.Capabilities), mesh.connect
// and mesh.logLevel. The status
// page also polls mesh.connections (each open connection, direct or
// relayed) and mesh.recentCalls (the node's last calls sent and served,
// newest first, with their outcome), which localapi.RegisterOperator
// serves on the same server.
//
// # Browsers
//
// Clients that send no Origin header (programs) are always accepted.
// Browser pages are refused unless their origin matches a pattern given
// with WithOriginPatterns: a node's loopback API must not be drivable by
// any web page the user opens. WithLoopbackPages also admits the pages
// the listener serves itself on a loopback address (a node's status
// page), and no others.
//
// # Goroutines
//
// Every goroutine the server starts is stopped by Server.Close, which
// waits for them; the same holds for Client.Close. Each request (on the
// server) and each server-initiated request (in the Client) runs on a
// goroutine of its own, so a slow handler never stalls the connection's
// reader; once it has answered, that goroutine waits briefly for the
// connection's next request rather than ending, so that a busy
// connection does not start a goroutine, and grow its stack, per request.
package rpc
