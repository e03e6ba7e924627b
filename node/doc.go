// Package node is meshagent's composition root: a libp2p host whose Ed25519
// identity is the agent id, the signed hello exchange, direct signed
// request/response streams, the registry of capability handlers and the
// policy checked before a handler runs.
//
// # Usage
//
//	n, err := node.New(
//		node.WithIdentity(key),
//		node.WithListenAddrs(addrs...),
//		node.WithServices(node.Service{Capability: c, Handler: node.EchoHandler()}),
//	)
//	defer n.Close()
//	resp, err := n.Call(ctx, protocol.CallRequest{To: id, Action: "echo", Params: params})
//
// # Requesters and the clients they vouch for
//
// A request's requester is the agent that signed it. An agent that calls
// for one of its own clients (a relay for a lobby agent) vouches for it
// in the signed request (CallRequest.OnBehalfOf, carried as
// protocol.MetaOnBehalfOf); the provider then matches the requester as
// "<agent id>/<client>" in authorized_requester_ids and in the Policy, and
// the handler sees Call.From and Call.OnBehalfOf. A bare agent id in an
// ACL admits that agent asking for itself, not its clients; "<agent
// id>/*" admits all of them.
//
// # Lifecycle
//
// New builds the host, registers stream handlers and starts listening; it
// leaves nothing running if it fails. Close removes the handlers, cancels
// in-flight work, closes the host if the node built it, and returns once
// every goroutine the node started has exited.
//
// # Concurrency
//
// All exported methods are safe for concurrent use. Requests to one peer
// share a single long-lived stream, multiplexed by correlation id; writes on
// it are serialised and reads are done by one reader goroutine per stream.
// While several calls wait on a stream, the reader only routes each answer,
// unverified, by its correlation id to the waiting call, whose own goroutine
// verifies it before parsing it, so that verification runs on every core; a
// lone call's answer is verified by the reader, which is already running.
// Handlers run on their own goroutines, bounded by Limits.MaxConcurrent; when
// the bound is reached the reader stops reading, which back-pressures the
// caller through the stream's flow control rather than dropping requests.
//
// # Requests run once
//
// A provider keys each request by its verified requester (the signing
// agent and the client it vouches for, if any) and request id
// (correlationId) in its task table. A request sent again under the same
// key while it runs does not start the handler: its stream receives the
// task's remaining progress and its final answer. Sent again after the task
// finished, it gets the recorded answer (success or error); the same id for
// another action or params is refused. Another requester's request under
// the same id is another task, and so is another vouched client's. The
// table keeps every running task and the most recent finished ones, at
// most 4096 and 64 MiB of results, errors and progress (each task keeps at
// most 64 progress results and 64 KiB of them); a request older than that
// would run again.
//
// # Calling any provider
//
// CallAny sends a request to one of the agents offering a capability,
// chosen by this node: candidates from the hello cache of connected peers
// and the directory, ordered by the power of two choices (heartbeat status
// and load, then latency), at most MaxAnyAttempts tried within the call's
// deadline. It moves to the next only when the request provably did not
// start where it was sent (no stream, not written whole, refused before
// the handler with CAPABILITY_NOT_SUPPORTED or RATE_LIMITED), or, after a
// connection lost mid-call, when the capability object says idempotent;
// mayFailOver states the rule for each code. It is a method of its own
// rather than Call with an empty target: a target left empty by mistake
// must not send a request to an agent nobody named, and the caller needs
// to learn which agent answered.
//
// # Presence
//
// Every Presence.Interval a node publishes a signed heartbeat on its own
// presence topic (status, load, capabilities, addresses, persona type),
// and at once when its status or capabilities change. A heartbeat reaches
// every agent of the mesh, so what presence costs an agent is the rate of
// the whole mesh, not its own: at a fixed interval it grows with the mesh.
// A node that knows of more than 10 agents on the presence topic
// therefore stretches its interval in proportion (at 10 s: 100 s at 100
// agents, 600 s, MaxHeartbeatInterval, from 600), so that a mesh of any
// size sends about what 10 agents send at the interval given: one
// heartbeat a second at the default (1.3 on average: each is sent at a
// random point of its interval's second half, so that agents started
// together do not heartbeat together), some 50 µs of CPU and 5 KB/s of
// forwarding for each agent. A node counts the agents it has heard or is
// connected to on the presence topic, whichever are more, and its first
// heartbeat goes out a second or two after it starts, once its first
// lookups have connected it: a newcomer to a large mesh, which has heard
// almost nobody, then stretches its interval by its neighbours from the
// first heartbeat. A node that hears more than 10 agents also
// keeps at least the median interval they announce, so that a newcomer,
// or every agent of a mesh started at once, sends at the mesh's pace from
// the first heartbeats it hears rather than at the configured one until
// it has heard every agent. Each heartbeat announces the interval until
// the next, and receivers judge staleness by it (stale after StaleAfter
// intervals, dropped after DropAfter), so a stretched interval needs
// nothing of them and older nodes read it too. What a large mesh gives
// up is freshness: load figures (CallAny's tie-break) and a stopped
// agent's staleness take a stretched interval to show (a crashed agent
// shows stale after 30 s in a mesh of 10, 5 minutes in one of 100); a
// status change is still sent at once, and a neighbour's connection
// closing shows at once as not connected. In a mesh of up to 50 agents
// a newcomer is answered with a heartbeat within a second, whatever the
// interval (presenceLoop). In a larger one it is not: each answer would
// be a heartbeat to the whole mesh from each of the newcomer's
// neighbours, a cost per agent that grows with the rate of joins and so
// with the mesh. There the newcomer knows the agents it deals with, its
// connected neighbours, from the hello exchanged on connecting (name,
// capabilities, features: Peers lists them, connected) and learns their
// status and load from their next periodic heartbeat. Broadcast filters
// are applied by each receiver to itself, so they need no presence of
// others. What each agent pays for presence is thus bounded whatever N:
// about one heartbeat a second to verify and forward, one heartbeat
// table entry per agent heard (at most the peer table's bound), and a
// hello per connection.
//
// # Deadlines
//
// Every write has a deadline (Limits.IOTimeout), and a peer that stops
// reading is cut off. The hello exchange has a deadline end to end. Request
// streams are long-lived and may sit idle between calls, or while a long
// handler runs, so their reads have no deadline; what an idle or stalled
// peer can hold is bounded by the resource manager (a few request streams
// per peer) and by Limits.MaxPerStream, and every stream is reset on Close.
//
// # Connections and listeners
//
// A node binds each listen address itself and never shares a port
// (SO_REUSEPORT is off): an address held by another process is a
// *ListenError. Connections are bounded by ConnLimits: the resource
// manager admits at most MaxInbound inbound connections, and the
// connection manager's watermarks sit below that, so idle connections are
// trimmed before they can lock a new peer out. Reaching HighWater inbound
// triggers a trim at once, idle unprotected connections first; peers with
// a call in flight, static relays, GossipSub mesh peers (of every topic
// but presence, which is best effort: see pubsub.WithUnprotectedFamilies)
// and, while the node has fewer than 10 other peers (bootstrapEnough),
// its bootstrap peers are protected; with 10 others the bootstrap peers
// are neither protected nor redialled, until the node falls below 10
// again.
//
// A node behind NAT reserves a slot on its static relays
// (WithStaticRelays) and is reached through them; hole punching (DCUtR)
// then upgrades a relayed connection to a direct one where the NATs allow,
// from the public addresses the relay observed. The host builds before it
// listens, so AutoRelay's first connection to a relay may leave from a
// throwaway UDP port; the node redials it from the listening socket and
// reserves again, or the observed address would be unpunchable. A relay
// (WithRelayService) also answers AutoNAT v1 and v2.
//
// Payloads from the network are decoded with every member's JSON type
// checked (protocol.DecodePayload): a wrong type is INVALID_MESSAGE naming
// the member, never a panic.
//
// # Store and forward
//
// A direct message (SendMessage) or a call handed to Forward (the bus's
// agent:<id> messages) whose agent is away waits in the node's outbox: a
// queue of its own in the store given with WithStore, written with fsync
// before the sender hears "queued" (ErrQueued). Away means unreachable
// (UNKNOWN_AGENT) or reached without a handler for the capability yet
// (CAPABILITY_NOT_SUPPORTED: its program has not reconnected to its
// node); waiting for it is not a failed attempt. A hello or heartbeat from
// the agent makes what waits for it due at once; between those one loop
// retries with a wait of half the message's age (1 s up to
// WithOutboxRetry, a minute by default), looking the agent up in the
// directory, and sleeps until the next message is due, a wake, or a
// replayed dead letter (store.Signal). A refusal (UNAUTHORIZED,
// INVALID_MESSAGE, INVALID_SIGNATURE) is a dead letter at once; another
// failure counts, and the third is a dead letter; past the TTL
// (WithMessageTTL, seven days) the message is a dead letter too. A
// restarted node resumes the queue from the store. The outbox is bounded
// (WithOutboxBounds: 1000 messages per agent, 64 MiB in all); past the
// bound a send fails with ErrOutboxFull and nothing is queued. The
// receiver drops a message id it processed recently, and every attempt
// at a forwarded call carries the entry's id as its request id, which the
// provider's task table runs once: a delivery repeated after a lost
// answer is not processed twice. A request refused for want of a handler
// is not remembered there, so the attempt after the handler attached runs
// it.
//
// # Mailboxes
//
// An agent may name mailbox relays (WithMailboxes) in its signed hello
// and heartbeats (heard mesh-wide; the capability directory keeps
// provider records per capability, with no per-agent record to extend);
// a relay serves them with WithMailboxService (package mailbox). A direct
// message, or a call handed to Forward (a bus message to agent:<id>),
// queued for an agent away that names mailboxes is deposited at once, as
// the signed request it would have been, in the first mailbox that takes
// it, and leaves the outbox (QueuedError.Mailbox); a full mailbox
// (QueuedError.MailboxErr matches mailbox.ErrFull) or none reachable
// leaves it in the outbox, whose passes try the mailboxes again (the
// entry keeps the mailboxes known when it was queued, for a node that
// restarts). A deposit sent without an answer (MailboxErr matches
// mailbox.ErrUnanswered) may be in the mailbox: that entry is never
// delivered directly, only deposited again, so that it runs once (see
// markDepositUnsure). The agent reads its mailboxes at start, on each connection
// to one, when its services or message handler change, and every
// WithOutboxRetry, verifies each envelope itself (signature, addressed to
// it, within the TTL), runs it as a live request of its sender (ACL,
// policy with its size and rate limits, schemas; once per request id,
// below) and acknowledges it. A request refused by those checks is
// dropped, logged and acknowledged; one that found no handler yet
// (CAPABILITY_NOT_SUPPORTED) or came past a rate limit stays for the next
// read, and so does a direct message whose handler failed (its sender
// would have retried it); a call whose handler ran and failed is
// acknowledged: it ran. What stays is deferred (mailbox.Client.Defer,
// once per item): the relay keeps it while the mailbox has room, and
// lets a new deposit take its place once the mailbox is full and it has
// waited an hour, so that throwaway senders cannot hold the mailbox with
// requests the agent never serves (see package mailbox, Full mailboxes).
//
// Delivery through a mailbox is at least once, execution once as far as
// the agent remembers: an envelope stays in the mailbox until the agent
// acknowledges it after running it, and the outbox's direct attempts and
// the mailbox copy of an entry carry the entry's id as request id, so a
// request that arrives both ways, or is fetched again after a lost ack,
// is answered from the provider's task table (direct messages: by message
// id) instead of running again. That memory is in-process and bounded: an
// agent that restarts between running a request and acknowledging it
// runs it again. Nobody waits for the answer to a mailbox request (its
// sender heard "queued"): the agent logs it, as the sender's outbox logs
// the answers of the calls it forwards.
//
// # Parts and their locks
//
// A Node is composed of parts, each a type of its own with its own lock;
// no part calls into another while holding its lock, so there is no lock
// order between parts to keep:
//
//   - Node.mu guards the lifecycle only: closed, checked with every
//     wg.Add after New, so that nothing starts once Close has begun.
//   - caller.mu: the request stream to each peer and the openings in
//     progress. reqConn.mu guards one stream's pending calls and
//     reqConn.wmu its writes; the two are never held together.
//   - registry.mu: the registered services by source (the node's own,
//     SetServices; others, Offer), their union, its sorted names and
//     Hello.Seq. The built-ins (task.status, task.cancel,
//     agent.message, and a2a.card with WithAgentCard: the node's A2A
//     card, signed by its key) are fixed at construction and need no lock; they
//     take the same path through execute as any service.
//   - taskTable.mu: the tasks run as provider; task.mu one task's state,
//     progress receivers and answer. The table's lock may be held while
//     taking a task's, never the reverse.
//   - sentTasks.mu: the provider of each request sent, for TaskStatus.
//   - peerTable.mu: other agents' hellos, and the signal WaitHello waits on.
//   - presence.mu: other agents' heartbeats.
//   - inbox.mu: the message handler and the message ids recently processed.
//   - mailboxes.mu: the mailboxes other agents announced (this agent's
//     own are fixed at construction).
//   - outbox.mu: the agents something waits for in the outbox (the queue
//     itself is in the store), counted again under the lock before one
//     is forgotten, so that an enqueue for it meanwhile keeps it.
//   - inboundStreams.mu: the request streams being served, reset by Close;
//     serverStream.wmu serialises the writes on one of them.
//   - beadContexts.mu: the shared bead contexts followed (seed 004), each
//     bead's document and when it last caught up; the resync loop and the
//     beads' topic subscriptions take it briefly, never across a fetch or
//     a publish.
//   - guard.mu: the calls in flight per peer, which protect its connection.
//   - anyProviders.mu: CallAny's calls in flight per provider, the
//     providers it could not reach, and the directory's answers per
//     capability.
//   - The policy is an atomic pointer, replaced whole by SetPolicy.
package node
