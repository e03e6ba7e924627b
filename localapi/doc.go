// Package localapi holds the faces of a node's loopback local API beyond
// JSON-RPC: the seeds' HTTP shapes, each a thin face over the operations
// the node already has: seed 004's discovery REST (GET /api/v1/agents,
// GET /api/v1/agents/{id}), seed 002's bindings (AgentProtocol, Exchange)
// and seed 003's REST (Seed003); and the local API's mesh.* methods as
// they move out of rpc.
//
// # mesh.* methods
//
// Register serves on an rpc.Server the methods of Node, the one
// interface they need of a node: mesh.audit, mesh.consensus,
// mesh.contextGet, mesh.contextSet, mesh.contextPatch, mesh.setStatus,
// mesh.discover (which streams mesh.discovered notifications to its
// caller while it runs), the durables' mesh.durables and
// mesh.forgetDurable, and the tasks' mesh.taskStatus, mesh.taskCancel,
// mesh.submit, mesh.taskWait and mesh.tasks. Their names, params and
// results are rpc's (the Go client calls them). daemon registers them on
// the local API's server and on a relay's own public server, where a
// credential must grant them. RegisterOperator adds what the operator
// watches and decides, mesh.connections, mesh.recentCalls and
// mesh.taskResolve, on the local API's server only (the one with
// rpc.WithControl, like mesh.status), as rpc.Server.HandleLocal's: a
// public listener answers them -32601 even where it shares that server.
//
// Still in rpc, because they keep state per connection or read it:
// mesh.subscribe and mesh.taskEvents (subscriptions a connection holds
// until it unsubscribes or ends),
// mesh.serve and its kin (capabilities a connection serves), mesh.call
// (it vouches for the connection's credential and streams mesh.progress;
// it is served by every rpc.Server, a node's or not) and the operator's
// control (mesh.status counts the server's connections). mesh.publish is
// still there too, to move next to mesh.subscribe or here. Those take
// what they need of the node as options when the server is built
// (rpc.WithTopics, rpc.WithDurables, rpc.WithAnyCaller, rpc.WithControl,
// rpc.WithProvider), as these take Node.
//
// # HTTP faces
//
// They state what they need of a node as small interfaces (Directory,
// Envelopes, AuditLog, BeadContexts, Librarian), which *node.Node
// satisfies; localapi never imports node, dht or pubsub. The HTTP faces
// are served only on the loopback local API listener, behind the same
// Host and Origin checks as the status page, never on a relay's public
// listener (seed 002's AgentProtocol excepted: a relay serves it too).
//
// # Seed 004 discovery
//
// An agent is listed in seed 004's registry shape: agent_id, name,
// persona_type, capabilities (names), status (available, busy, or stale
// once its heartbeats are overdue), current_bead, max_concurrent_beads,
// load, last_heartbeat, connected. The list is this node's view of the
// mesh: itself, and every agent it has a hello or heartbeat from (bounded
// by the node's peer table). Filters are query parameters: status,
// persona_type and capability (repeatable: an agent must offer every one
// named); any other parameter is a 400, so a typo never widens a search.
// GET /api/v1/agents answers {"agents": [...], "count": N}, sorted by
// agent_id; GET /api/v1/agents/{id} takes the id as a peer id or seed 002's
// base64 public key and answers the agent or 404. Errors are
// {"error": "..."} with the status code.
//
// # Seed 003 agent requests
//
// Seed003 serves POST /agent/request, GET /agent/status/{request_id},
// POST /agent/context, GET /agent/capabilities and GET /docs (the
// embedded OpenAPI 3 document, openapi.json). Each agent holds a bearer
// token from an rpc tokens file whose name is its agent_id; without
// tokens the /agent/* paths answer 404, a missing or unknown token 401. A
// request of type T is a detached task (Librarian.Submit, deadline
// RequestDeadline) of capability "librarian:<t>" on a connected agent
// that offers it; its request_id is the task id and its correlation id
// "seed003:<agent_id>:<uuid>", by which GET /agent/status shows it only
// to its agent. The status is the task's state in seed 003's names, and
// once it ended the provider's result read as a LibrarianResponse. POST
// /agent/context is a synchronous call of "librarian:context". Bodies
// are decoded by protocol.DecodeStrict and bounded (MaxAgentRequestBytes
// and seed 003's limits); the two POSTs share a token bucket per agent
// (DefaultRequestsPerMinute, WithRequestsPerMinute), 429 with
// Retry-After past it. The mapping in full: docs/seed003.md.
package localapi
