// Package pubsub carries signed AgentProtocol envelopes over GossipSub and
// gives the bus's topic names and patterns a mesh-wide meaning.
//
// # Wire form
//
// A GossipSub message's data is signature(64) ‖ canonical envelope bytes,
// the same bytes a direct stream carries after its length prefix. The
// router runs with StrictNoSign: the envelope's own Ed25519 signature is
// the only one, so there is one signature per message. The GossipSub
// message id is the first MessageIDSize (12) bytes of that signature.
//
// # Message ids
//
// The id (MessageID) is GossipSub's key and nothing else: each node
// computes it for itself from the bytes it receives, to drop copies it
// has seen and to name messages in IHAVE, IWANT and IDONTWANT gossip.
// Envelope ids, replay guards, durable positions, history keepers and
// the bus's dedupe use the envelope's own id and author. An id is in
// every IHAVE and IWANT, some 49 of them per agent per published
// message at 200 agents, so it is kept short: 12 bytes, where the hex of
// the whole signature was 128 characters and the first 20 bytes were
// used until the scale runs showed gossip ids to be a quarter of a
// mesh's bytes (docs/scale.md). 96 bits of an Ed25519 signature's R, a
// point derived from a hash of the signer's secret and the message,
// keep two messages from sharing one by chance: half a chance needs
// some 2^48 messages inside the 30 s a node remembers ids (seenTTL).
// They are taken as they are rather than hashed: hashing would cost
// every copy a SHA-256 and hide nothing, since its input, the
// signature, is public as soon as the message is sent.
//
// What an attacker can do with an id. The id is computed before
// validation, as it always was, so anyone can send bytes that begin
// with another message's signature and carry the same id; but GossipSub
// marks an id seen only once its message has been accepted, and such a
// copy fails verification and is refused, leaving the real message to
// be delivered and forwarded as before. Making a message look seen
// before it is sent would take its signature in advance, which needs
// the author's key; a message of the attacker's own with a given id
// would need an Ed25519 signature whose first 96 bits it chose, some
// 2^96 attempts, and would only hide it behind the message it copied.
//
// Nodes of different versions compute different ids for the same
// message (this id, or the 20-byte or hex ids of earlier versions). Delivery by
// the mesh does not depend on ids, and each side still answers the
// other's IWANT, so messages reach every subscriber, but gossip between
// the two sides works against itself: each takes the other's IHAVE ids
// for messages it has not seen and fetches messages it already has, and
// never sees the id it asked for arrive, which GossipSub counts as a
// broken promise and penalises. A peer of the other version that gossips
// to a node every heartbeat ends with a negative score there, and a
// negative score keeps a peer out of the mesh: as meshes turn over,
// more messages cross between old and new nodes by gossip, a heartbeat
// or so later, until all are upgraded.
//
// # Validation
//
// Every GossipSub topic has a validator. It refuses oversize data, reads
// only from.agentId from the bytes (protocol.ClaimedSigner: the author's
// key is inlined there, and a canonical envelope begins with it, so an
// exact prefix scan finds it without parsing JSON), then verifies the
// signature with protocol.Open before decoding anything else. With StrictNoSign the
// GossipSub From field is empty and ReceivedFrom is the forwarding peer,
// not the author, so the author is from.agentId alone. Results:
//
//	oversize, no signature, bad signature, not canonical, malformed → Reject
//	type not notify, to.broadcast false, to.topic missing or of
//	another family                                                  → Reject
//	stale timestamp or (author, id) already seen (sign.ReplayGuard) → Ignore
//
// Reject lowers the forwarding peer's score; Ignore does not. GossipSub's
// seen-message cache, which drops copies before validation, remembers an
// id 30 s (seenTTL, not its default 2 minutes): a copy arriving later is
// refused by the replay guard, which remembers (author, id) for its whole
// window.
//
// # Topics and patterns
//
// A bus topic "family:rest" maps to the GossipSub topic
// "/meshagent/topic/family", family being the part before the first ':' or '.'
// (the whole name if there is none). Receivers filter exactly with Match:
// a pattern matches fnmatch-style (path.Match: "*", "?", "[...]", where
// "*" does not cross "/"); a pattern without
// wildcards that ends in ':', '-', '.', '/' or '_' matches as a prefix;
// anything else matches exactly. A pattern whose family contains a
// wildcard (for example "*") is refused with ErrPattern: it would need
// every family, and GossipSub has no catch-all.
//
// # Broadcast filters (seed 004)
//
// Publish may attach a filter, carried in the envelope metadata as
//
//	{"filter":{"includeAgents":[...],"excludeAgents":[...],
//	           "personaTypes":[...],"capabilities":[...]}}
//
// A receiver described by WithSelf delivers a message only if: its agent
// id is not in excludeAgents; includeAgents is empty or names it;
// personaTypes is empty or holds its persona type; and it has every
// capability listed. Filtered messages are still relayed.
//
// # Delivery
//
// Publish waits up to WithPublishWait (default 5 s) for at least
// WithMinPeers receivers (default 1), then publishes and returns how many
// it went to; with none it returns an error wrapping ErrNoPeers
// (go-libp2p-pubsub issue 331: a publish is never silently lost). The
// receivers are the topic peers connected now plus this node's own
// subscriptions matching the topic: a node's subscribers are part of the
// one subscription world, so a message with only local subscribers is
// delivered to them at once and is not an error. A remote subscriber not
// yet found when a local one exists is not waited for; it is found
// through the node's own subscription to the family, which advertises and
// looks for subscribers while its mesh is thin.
//
// A node's own messages are flood-published (gossipsub v1.1: sent to
// every topic peer scoring above the publish threshold, not only to its
// GossipSub mesh) while the node subscribes to the family and its mesh
// has not formed (fewer than Dlo connected mesh peers, or than its topic
// peers when there are fewer; a mesh peer whose connection has closed is
// not counted, though the router keeps it until it has seen the close).
// A node that has just subscribed to a family has an empty mesh until
// the next heartbeat grafts, and gossip goes only to
// non-mesh peers, so a mesh-only publish right after subscribing would
// reach nobody while Publish counted its topic peers as receivers. Once
// the mesh has formed it reaches every subscriber, and flooding would
// cost the publisher one send per topic peer (nearly N on a
// well-connected mesh) instead of D; a node that only publishes to a
// family sends to a GossipSub fanout of D topic peers. The router's flood
// setting is one flag, set for each message on the router's event loop
// (flood.go). A node's own message is not verified again by its own
// validator: Publish hands it the envelope it sealed. Subscribers on the
// publishing node receive its own messages, once each. WithID lets a publisher that also subscribes (the
// seed 001 bus) choose the envelope id and so recognise its own message
// when it comes back.
//
// Each subscription has a bounded queue (WithQueueSize, default 256); when
// it is full the newest message is dropped and counted (Dropped).
//
// # History keepers and the store protocol
//
// A node started WithArchive is a history keeper: it subscribes to the
// patterns it keeps (or, for "*", to every family a connected peer
// subscribes to, learnt from the peers' GossipSub subscription messages;
// presence excepted, at most MaxKeptFamilies) and keeps each message as
// received, signature and canonical bytes, so that a fetcher verifies it
// end to end; broadcast filters do not apply to what it keeps. Writers
// of their own (16, behind a queue of 4096 that drops the newest when
// full, KeepDropped) let the store's group commit take many messages per
// fsync. Its subscriptions are not receivers Publish counts for its own
// node. The Archive (node's store) bounds what is kept by age and size.
// Keepers advertise themselves in the directory under
// "meshagent-store:<family>".
//
// A keeper answers protocol.StoreProtocol streams, many queries per
// stream, each a frame holding a HistoryQuery
//
//	{"pattern","since","until","cursor","limit"}
//
// decoded strictly (ParseHistoryQuery: no unknown or repeated member, a
// pattern Subscribe would take, RFC 3339 times, limit 0..MaxPageSize),
// and answered with a header frame {"count","next"} followed by count
// frames, each a kept message as signed, oldest first (envelope time,
// then "<id> <author>"); next is the cursor of the following page, ""
// at the end. A page holds at most MaxPageSize messages and
// MaxPageBytes; the keeper reads at most 8192 entries of its family per
// page, so a sparse pattern gets short pages and a cursor. A refused
// query gets {"count":0,"error":{"code","message"}}: RATE_LIMITED past 50
// queries a second per peer (burst 100), INVALID_MESSAGE (the stream then
// closes), INTERNAL_ERROR. A stream idle for 30 s is closed.
//
// FetchHistory asks up to three keepers (connected peers that speak the
// protocol, else those the directory names, else the first to appear
// within WithFetchWait), and this node's own archive, for every page
// since a time, verifies each message as the topic validator does except
// for the replay window, applies broadcast filters, and returns the
// union once each (by author and id), ordered by envelope time, id and
// author, at most MaxFetch. The keepers are read at once, each within its
// own deadline, half of what is left of the fetch's window (at most
// 30 s): a slow keeper is given up then, and never holds the fetch, or a
// durable resume, past it.
//
// # Durable subscriptions
//
// SubscribeDurable saves, through Positions, where a named subscription
// is: a floor time, and the messages at or after it that its handler
// took. The floor trails the newest message taken by twice the replay
// window (a live message older than the window is dropped by the
// validator, so none can arrive behind it), and rises further when more
// than 4096 messages would be remembered.
//
// The handler (DurableHandler) is called one message at a time, in
// order, on the subscription's own goroutine, and may block: a message
// counts as taken only when it returns nil, and only then does the
// position move past it. An error means the message was not processed:
// the subscription stops delivering (Halted), so that nothing after it
// is taken out of order, and the next SubscribeDurable of the name
// delivers it first. The handler's ctx ends at Cancel, which waits for
// the handler to return before the last save.
//
// On resume the live subscription starts first and its messages are
// held; SubscribeDurable fetches since the floor (the only step that may
// fail it) and returns; the subscription's goroutine then delivers, in
// order, what was fetched and not remembered, then the held live
// messages sorted by envelope time (those already taken skipped), then
// the live ones as they come. Live messages never wait for the handler:
// they are held, at most 65536 of them and 32 MiB (payloads, and 1 KiB
// each for the rest) per subscription and 256 MiB for all of a node's,
// and when more come, or the subscription's queue dropped some, or a
// fetch was truncated, the goroutine fetches again since the floor once
// the handler has caught up (at most five rounds for the first
// catch-up), and once more two seconds after the first catch-up, for a
// message that reached a keeper but not this node while its
// subscription was joining the mesh.
//
// A node keeps positions for a bounded number of names (its Positions
// decide: node's store keeps 256). A new name is saved before
// SubscribeDurable returns, so that one past the bound is refused then
// (ErrTooManyDurables, an ErrDurable) rather than lost at its first save;
// ForgetDurable deletes the position of a name not in use, which is how
// its owner makes room; Durables lists the names kept and which of them
// run now. Positions are not forgotten on their own, for
// age: a subscriber may be away for weeks and still expect to resume,
// and forgetting it silently would restart it from now, missing what was
// published meanwhile, with no error to tell.
//
// Positions are saved one write at a time as they change, and at Cancel
// and Close. Delivery is at least once, in order: a message is delivered
// again (same id and author) only when its handler did not return nil
// (a process killed mid-handler), or when the process stopped before
// the save after it completed.
//
// # Configuration
//
// New takes options (options.go): defaults, then the options in order,
// then one validation of the whole; a refused configuration wraps
// ErrInvalidConfig. The options of a single Publish (WithWait, WithAtLeast,
// WithFilter, WithID) override the defaults for that call. The package
// does not log: what it refuses it returns, and GossipSub's own scoring
// records misbehaving peers. WithMetrics counts messages published,
// delivered, dropped and rejected by topic family; rejections are read
// from a GossipSub raw tracer, with the validator's reason (size,
// malformed, signature, misaddressed, replay) left in the refused
// message's ValidatorData, and include what GossipSub refuses before the
// validator runs (throttled, queue full).
//
// # Connection protection
//
// GossipSub protects a peer from the connection manager while it is in
// the mesh of any of the node's topics. WithUnprotectedFamilies lifts that
// for best-effort families (the node uses it for presence, which every
// agent is in): their mesh peers may be trimmed, and GossipSub grafts
// another subscriber at its next heartbeat. The mesh peers of the other
// families stay protected.
//
// # Peer scoring
//
// Scoring is on with global parameters only (see scoreParams): app score
// 0, IP colocation off (agents sharing a machine or a NAT are normal
// here, and the penalty starved fan-out on one address), behaviour penalty
// weight -1 (threshold 6, decay 0.9), decay every second to zero at 0.01;
// thresholds gossip -100, publish -500, graylist -1000, accept PX 10,
// opportunistic graft 3. Invalid messages are punished through Reject.
// No topic has score parameters, so the scorer's per-message delivery
// records feed nothing; they are kept 5 s (scoreRecordTTL), not
// GossipSub's 2 minutes.
package pubsub
