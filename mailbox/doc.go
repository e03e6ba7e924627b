// Package mailbox holds requests for agents that are away, on relays, so
// that two agents never online at the same time can still talk.
//
// An agent names its mailboxes (relays, as multiaddrs ending in
// /p2p/<relay id>) in its signed hello. A sender that cannot reach the
// agent deposits there the request envelope it would have sent, signed
// end to end: a direct message (agent.message) or any call its node
// forwards for it, such as a bus message to agent:<id>. The agent, when
// it connects to the relay again, fetches what waits for it, verifies
// each envelope itself, runs it as it would a live request and
// acknowledges it, which deletes it. The relay is trusted to keep
// messages, never to speak for anyone: it cannot forge or alter an
// envelope without the recipient noticing.
//
// # What a mailbox holds
//
// Any signed request addressed to its agent, whatever its capability:
// the relay cannot know the agent's ACLs, policy or schemas, and does not
// try. The recipient applies them to a fetched request exactly as to a
// live one; a request they refuse is dropped (and acknowledged, so that
// it is not fetched again) and logged. A mailbox holds no responses: the
// recipient's answer to a fetched request has nobody waiting for it (the
// sender was told "queued" long ago) and is logged there, not returned.
//
// # Protocol
//
// One request and its answer per libp2p stream (protocol.MailboxProtocol),
// each a length-prefixed JSON frame (protocol.AppendFrame). Requests
// (Request, decoded strictly by ParseRequest):
//
//	{"op":"deposit","to":"<agent id>","envelope":{…signed request envelope…}}
//	{"op":"fetch","after":"<cursor>","limit":N}
//	{"op":"ack","ids":["<item id>",…]}
//	{"op":"defer","ids":["<item id>",…]}
//
// A deposit must come from the envelope's signer, be a signed request
// addressed to "to", at most MaxEnvelopeBytes, and be no older than the
// mailbox's TTL: the relay verifies all of it before it stores a byte. A
// fetch returns the items held for the authenticated remote peer, and
// only for it, in deposit order, a page at a time, with a cursor for the
// next page; an ack deletes items of the remote peer's own mailbox; a
// defer marks items of it that its agent fetched and could not take yet
// (see Full mailboxes), and a fetched item says it was ("deferred":true),
// so that the agent does not mark it again. The
// answer (Response) has a status: "ok", "full" (the deposit would take
// the agent's mailbox, the sender's share of it, or the relay past its
// bounds, and no deferred item can make room: the sender keeps the
// message), "refused" (the request is not acceptable and never will be)
// or "error" (the relay failed; try again).
//
// # Storage
//
// The Server keeps items in a named queue of the relay's store (one
// bbolt file, fsync'd before a deposit is answered "ok"), bounded per
// agent in messages and bytes, per sender within an agent's mailbox (a
// tenth of it by default: one signer, whoever it is, cannot fill an
// agent's mailbox alone), and in total bytes. The bounds are checked
// and the item written in one transaction. An item expires after
// the TTL (seven days by default, as the sender's outbox does): its due
// time in the queue is its expiry, and one loop, owned by the Server,
// deletes what is due and sleeps until the next expiry.
//
// # Full mailboxes
//
// Identities cost nothing, so a bound per sender does not stop ten
// throwaway signers, each within its tenth, from filling an agent's
// mailbox with requests for a capability it never serves. Such items
// would stay for the whole TTL, since a request for a capability the
// agent does not serve yet is kept for a handler that may attach later.
// The rule that undoes this rests on the one judge an attacker cannot
// multiply, the agent itself:
//
//   - When the agent fetches an item and cannot take it yet (no handler
//     attached for its capability, a rate limit, a direct message whose
//     handler failed), it defers the item. The relay records when it first
//     did.
//   - While the mailbox has room, a deferred item stays until its TTL, for
//     a late handler.
//   - When a deposit finds the agent's bounds (items or bytes) reached,
//     it takes the place of items deferred at least DisplaceAfter ago (an
//     hour by default, so that a program restarting does not lose its
//     backlog), one at a time, each from the sender that then holds the
//     most items in the mailbox, its first. The check and the deletion
//     are the deposit's transaction. A deposit that deferred items cannot
//     make room for is "full", as before.
//
// Deferred items lose their place and nothing else: items the agent has
// not fetched yet never do. An unseen item is
// indistinguishable from an honest one to the relay, and displacing it
// would lose what its sender was told was kept. What is displaced had
// been answered "ok", and no path runs back to its sender, so the relay
// logs each one (sender, item, when it was deferred) at warning level and
// counts it (Server.Displaced, exported by a node as
// meshagent_mailbox_displaced_total); the agent logged it when it deferred it.
// A deposit answered "full" loses nothing: the sender's outbox keeps the
// message and tries the mailboxes again, or delivers it directly when it
// sees the agent.
//
// Why not a fair share (capacity / distinct senders) that lets a sender
// under it displace one over it: with free identities every attacker
// identity is under its share, and it would displace honest items that
// the agent has never seen. What remains possible, and is visible in the
// count: an attacker depositing as fast as deferred items age keeps the
// mailbox full only while it keeps depositing (and only once the agent
// has deferred what it held), where before one flood held it for the TTL;
// and while the agent stays offline, nothing it has not seen is displaced.
package mailbox
