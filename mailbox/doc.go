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
// # Whom a relay holds mail for
//
// Only agents that named the relay as their mailbox: a hello or
// heartbeat the agent signed lists it (its node calls Server.Register),
// or the agent fetched from it (its own authenticated stream). The fact is
// kept in the relay's store (AgentsScope) for the TTL after the agent
// last said so, for at most MaxAgents agents; a deposit for any other
// agent is "refused", saying so. Each sender's share of the whole relay
// is bounded too (SenderTotalBytes, a sixteenth of TotalBytes), so that a
// sender spreading deposits over many agents cannot fill the relay.
//
// # Known senders and the reserve
//
// A sender is known to an agent once the agent acknowledged (took) an
// item of it from this relay; the relay remembers that (KnownScope) for
// the TTL after the last, for at most MaxKnown pairs. Half of each
// mailbox (ReservedItems, ReservedBytes) is kept for known senders:
// senders the agent never took anything from, however many identities
// they use, deposit only while the mailbox holds less than the other
// half. The relay as a whole keeps the same reserve: the deposits of all
// senders unknown to their recipients hold at most UnknownTotalBytes
// together (half of TotalBytes; store pool UnknownPool, counted as each
// is deposited), so that throwaway senders filling throwaway recipients
// that registered for the purpose stop there, and the other half takes
// only deposits of senders known to their recipient. A flood of fresh
// identities therefore closes a mailbox, or the relay, to new senders
// only (they keep their messages in their outboxes), never to the
// senders an agent already deals with.
//
// What this does not stop: an attacker controlling both ends makes its
// own senders known by fetching and acknowledging their items with its
// own recipients, and then fills the known half as well, each of its
// recipients within its mailbox's bounds and each sender within its
// share of the relay (SenderTotalBytes). The relay cannot tell such a
// pair from an honest one; the bounds per agent and per sender make it
// cost at least TotalBytes/2 / PerAgentBytes recipients and as many
// senders (8 each by default), each of which must have taken an item.
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
// Only deferred items are displaced. An item the agent has not fetched
// never is: the relay cannot tell it from an honest one, and its sender
// was told it is kept. A displaced item was answered "ok" too, and no
// path leads back to its sender, so the relay logs each one at warning
// level (agent, sender, item, when it was deferred) and counts it
// (Server.Displaced, exported by a node as
// meshagent_mailbox_displaced_total); the agent logged it when it left it
// for later. A deposit answered "full" loses nothing: the sender's outbox
// keeps the message, tries the mailboxes again on its next pass, and
// delivers it directly when it sees the agent.
//
// A fair share (capacity / distinct senders, a sender under it
// displacing one over it) was the alternative. With free identities
// every attacker identity is under its share, so it would displace honest
// items the agent has never seen, with nobody to tell. What remains
// possible: a mailbox flooded while its agent is offline stays full until
// the agent has fetched and deferred the flood, and DisplaceAfter has
// passed; and an attacker that keeps depositing as deferred items age
// competes with honest senders for the places they free. Both take a
// sustained flood, which the count shows, where one flood used to hold a
// mailbox for the whole TTL.
package mailbox
