// Package localapi holds the faces of a node's loopback local API beyond
// JSON-RPC: the seeds' HTTP shapes, each a thin face over the operations
// the node already has. Today that is seed 004's discovery REST
// (GET /api/v1/agents, GET /api/v1/agents/{id}); the local API's mesh.*
// methods and the other seeds' HTTP surfaces join it as they move out of
// rpc.
//
// It states what it needs of a node as small interfaces (Directory), which
// *node.Node satisfies; it never imports node, dht or pubsub. It is served
// only on the loopback local API listener, behind the same Host and Origin
// checks as the status page, never on a relay's public listener.
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
package localapi
