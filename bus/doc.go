// Package bus is the seed 001 message bus: clients of an rpc.Server
// subscribe to topic patterns, send messages, and receive them as
// processMessage requests, with acknowledgements, propagation policies,
// retries, dead letters and history. It is bridged to the mesh (topics
// and agents) through an interface it declares, so it never imports the
// node and its tests need no libp2p. Whether its topics reach the mesh is
// stated when it is built (WithTopics): without it they are local to the
// bus.
//
// # Usage
//
//	srv, err := rpc.New(n, rpc.WithLogger(log)) // n is the mesh; *node.Node is one
//	if err != nil { … }
//	b, err := bus.New(srv, n, bus.WithTopics(n), bus.WithStore(st), bus.WithLogger(log))
//	if err != nil { … }
//	… serve srv …
//	srv.Close() // first: no request is served after it
//	b.Close()   // then the bus: its retry loop and history writer
//
// # Methods
//
// Seed 001 is followed where it is exact; its loose parts are read as the
// design settles them. initialize is the rpc server's (it comes first on
// every listener); the bus serves:
//
//	subscribe    {"topic", "policy"?, "defaultHandler"?, "group"?} -> {"success": true}
//	unsubscribe  {"topic", "defaultHandler"?, "group"?} -> {"success": true}
//	sendMessage  {"topic", "payload"} -> {"success", "stopPropagation", "acks", "messageId"}
//	bus.history, bus.deadLetters, bus.replay   (need a store: WithStore)
//
// and delivers with processMessage {"topic", "payload"}, or with
// sendMessage to a client that answers processMessage with -32601 (the
// base protocol).
//
// The first three are served to anyone on a public listener
// (rpc.Server.HandlePublic), within the topic patterns of the client's
// credential; sendMessage to agent:<mesh agent id>, a mesh call made as
// the relay, needs a credential that grants mesh.call. The three bus.*
// methods need one that grants them.
//
// # Routing
//
// The subscription table is an ordered list under a lock of its own: a topic goes to the subscriptions whose pattern matches it,
// newest first, skipping those shadowed by a newer subscription to the
// same pattern. Default handlers (subscribe with "defaultHandler": true)
// are kept apart: the newest one matching a local message that nothing
// else takes gets it.
//
// # Queue groups
//
// "group" is an extension of seed 001 taken from NATS's queue groups: the
// subscriptions of one group to one pattern are a member set that takes
// the place of a single subscription in the ordered list, where its
// newest member stands (it shadows, and is shadowed by, the other
// subscriptions to its pattern as one). Each message routed to it goes to
// one member: the one with the fewest deliveries in flight, ties in turn.
// The members share the group's propagation policy (a member asking for
// another is refused). A retry of a failed delivery is addressed to the
// group rather than to the member, so it goes to another member when the
// member left; with none connected it waits for one, as a retry waits for
// an absent client. The group ends with its last member. Bounds:
// MaxGroupMembers per group, MaxGroupsPerPattern per pattern.
//
// # Delivery
//
// One pass delivers a message to a list of subscriptions under their
// propagation policies (Propagation): it stops after a subscriber that
// processed the message (the default), only on stopPropagation, or never
// (continueAll, whose consecutive subscriptions are delivered to at
// once). A message's first delivery and every retry take the same pass.
//
// A first delivery goes, in order: to a mesh agent when the topic is
// agent:<mesh agent id> and no local client subscribes to it (the
// payload's "type" names the capability; when the agent is away and the
// bus was built WithForwarder, the message waits in the mesh's outbox, or in a
// mailbox the agent names, and the ack says queued); to local
// subscribers; to the mesh's topic peers when the bus was built
// WithTopics (in the background when there are local subscribers,
// otherwise its ack routes the message); and
// to a default handler when nothing else took it. The ack of a mesh
// agent's answer carries, beyond seed 001's ack, its "receipt": the
// agent's signed final response envelope, which anyone can check later
// (protocol.OpenReceipt, meshagent verify --provider) to show the agent
// received the message and what it answered. Messages from the mesh
// go to local subscribers only, never to a default handler (every node
// would take them), and never back to the mesh. Each mesh message is
// delivered once, however many local patterns match it; the bus
// publishes its own with an id it chose and knows them when they come
// back.
//
// # Outbox, retries, dead letters, history
//
// With a store, a failed or should_retry delivery is in the outbox before
// sendMessage answers (its ack says retrying). The retry loop sleeps until
// the next outbox message is due, or until woken by a new retry, a replay
// or a subscriber coming back; it never polls. A retry goes to the client
// it failed for (or the queue group it was picked from), or is routed
// afresh when a default handler asked for it.
// After MaxAttempts deliveries a message is a dead letter. A retry that
// finds its client away (not subscribed, or its connection gone during the
// attempt) counts no attempt: the message waits until the client
// subscribes again, up to MessageTTL from when it was sent, then is a dead
// letter that says so. A local message nothing takes is a dead letter at
// once. Every message is written to history by a background writer, so
// that no sendMessage waits for a history commit: it gathers what is sent
// for up to 10 ms and writes it in one transaction (store.RecordAll), so a
// message is in history within about 10 ms and a commit of its answer, and
// Close writes what was queued. Message ids are store.NewID's: 32 hex
// digits, time-ordered, so the history's id index grows at its right edge.
//
// # Concurrency
//
// The bus's methods are safe for concurrent use. The subscription table
// and the mesh subscriptions each have a lock, and neither is held while
// calling a client, the mesh or the store. Deliveries run on the request's
// goroutine (sendMessage), on a goroutine of the bus (mesh messages,
// retries). A continueAll run sends its requests from that goroutine,
// which then collects the answers (rpc.Conn.TryStart): a fan-out costs
// no goroutine per subscriber. Only a delivery that cannot start so (to a
// queue group, or to a connection whose request slots are all taken, for
// which Call waits) runs on a goroutine of its own. A subscriber's answer
// is decoded by encoding/json/v2 (github.com/go-json-experiment/json).
//
// # Lifecycle
//
// New registers the methods with the server and starts the retry loop and
// the history writer (with a store). Close, after the server's Close,
// stops them, waits for every goroutine of the bus, and cancels its mesh
// subscriptions. The store is the caller's: close it after the bus.
//
// # A Go client
//
// Client is a Go program's side of the bus: Dial with a ProcessFunc that
// answers the bus's processMessage deliveries (the Client is passed to
// it, so an agent replies through its own connection), then Subscribe and
// Send. ProcessHandler is the same delivery decoding for a client that
// dials rpc itself.
package bus
