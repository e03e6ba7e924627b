// Package relay holds the seed 001 message bus, served on an rpc.Server
// (New composes the two), and, until it moves to a package of its own,
// the seed 000 lobby (Lobby, at "/lobby").
//
// This package is not libp2p's circuit relay. That is a libp2p transport
// service, which the relay command switches on separately; the two share
// only a name.
//
// # The bus
//
// Seed 001 is followed where it is exact and its loose parts are read as
// DESIGN.md settles them. The handshake (initialize, and initialize
// first) is the rpc.Server's; the bus adds:
//
//	subscribe    {"topic", "policy"?, "defaultHandler"?} -> {"success": true}
//	unsubscribe  {"topic", "defaultHandler"?} -> {"success": true}
//	sendMessage  {"topic", "payload"} -> {"success", "stopPropagation", "acks", "messageId"}
//	bus.history, bus.deadLetters, bus.replay   (need a store: WithStore)
//
// The first three are served to anyone on a public listener
// (rpc.Server.HandlePublic), within the topics the client's credential
// allows; sendMessage to agent:<mesh agent id> (a mesh call made as the
// relay) needs a credential granting mesh.call.
//
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
// One Server holds one bus and one retry loop over its store, whichever
// listeners serve it (the local API and a relay's public listener).
// Close stops the server, then the bus's retry loop and history writers.
package relay
