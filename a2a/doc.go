// Package a2a speaks A2A v1.0 (the Agent2Agent protocol's JSON-RPC
// binding) both ways, as a client of a node's local API (rpc): it never
// imports node.
//
// Outward, a Gateway serves each mesh agent the node can reach as an A2A
// agent: an Agent Card at /agents/<agentId>/.well-known/agent-card.json
// (the node's own also at /.well-known/agent-card.json) and a JSON-RPC
// endpoint at /agents/<agentId>/. A card's skills are the agent's
// capabilities. Every card is built and signed by its own agent (the
// a2a.card built-in, answered with OwnCard): a JWS over the card's JCS form
// without signatures, EdDSA, kid the agent id, so that a verifier derives
// the key from the kid. The gateway checks that signature before serving a
// card; it cannot forge one.
//
// SendMessage runs the skill named in message.metadata.skill as one
// durable mesh task (its id is the A2A task id) with the first data part as params; the
// result is an artifact's data part, a mesh error a FAILED task whose
// message reads "CODE: message". SendStreamingMessage streams the task,
// each mesh progress as a WORKING status update with a data part, then the
// final task. GetTask, CancelTask, SubscribeToTask and ListTasks read and
// cancel the tasks the gateway follows and, for those it does not (from
// before a restart), the node's records of them: see Tasks.
//
// Inward, Handler serves one skill of an external A2A agent as a mesh
// capability (the "a2a" handler kind of a capabilities file).
//
// The types in types.go are the specification's, named as it names them,
// so that moving to a v1.0 Go library is small.
package a2a
