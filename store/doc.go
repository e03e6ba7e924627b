// Package store is meshagent's embedded, crash-safe persistence: the bus
// outbox (messages accepted but not yet delivered), the dead-letter queue,
// message history with secondary indexes, and lobby registrations (seed
// 000). It keeps everything in one bbolt file (go.etcd.io/bbolt), which the
// relay and the node open with Open and close with Close.
//
// # Durability and throughput
//
// Every write is a bbolt transaction committed with fsync (NoSync is never
// set), and a method that writes returns only after its commit has reached
// the disk. That is what lets the bus acknowledge a message as soon as
// Enqueue returns: an acknowledged message survives a crash of the process.
// (The crash tests kill a writer with SIGKILL; they prove that commits are
// atomic and that nothing acknowledged is lost when the process dies, not
// what a power cut does to a disk that lies about flushing.)
//
// One fsync per commit bounds serial throughput. Concurrent writes share
// commits through a leader/follower group commit: a write that finds no
// commit in progress commits at once; writes that arrive while it is being
// fsync'd queue, and when it ends the first of them commits the whole
// queue (up to 1000) in one transaction. Groups grow with the fsync
// latency and nobody waits for a timer, so a lone writer pays nothing.
// Every write in a group returns only after the shared commit is on disk,
// and a write whose function fails is taken out and run on its own, so
// one bad write never fails the others.
//
// bbolt's own DB.Batch is the usual way to do this, and WithBatchDelay
// selects it, but every write that joins a batch waits for a timer (10 ms
// by default) even when no other write is coming; BenchmarkEnqueue
// compares the two (figures in the README's Performance section).
//
// # A full disk
//
// A write the store could not commit (no space left on device, an I/O
// error) matches ErrWrite; nothing of it is kept. With WithReserve the
// store keeps that many bytes on disk beside its file (<file>.reserve):
// the first commit that fails for want of space deletes the reserve and
// is tried again in its room, so that a write of something already
// acknowledged (the bus's history, written after its answer) still lands.
// While the reserve is spent, new queue entries are refused (ErrSpaceLow,
// matching ErrWrite) and SpaceLow says so, so that callers refuse new
// messages before acknowledging them; the store writes the reserve again,
// at most once a second, once there is room, and accepts them again.
//
// # Outbox
//
// Enqueue assigns each message a sequence number (Pending returns messages
// in that order) and a next-attempt time, now; Retry moves that time and
// bumps Attempts; Postpone moves it without bumping Attempts (the bus
// postpones a message whose subscriber is away); Due returns the messages
// whose time has come, earliest first, and NextDue the earliest time, so a
// retry loop sleeps until then. An index on To (bucket outbox_to, added by
// schema 2; Open builds it when it upgrades a schema 1 file) lets Wake make
// everything addressed to one client due at once when that client comes
// back, at a cost that grows with that client's messages, not the outbox.
// Delivered deletes a message and records nothing else: history is
// written separately with Record, so that the bus decides what history is.
// An id is in at most one of outbox and dead-letter queue: Enqueue refuses
// an id present in either, and DeadLetter and Replay move a message between
// them in one transaction.
//
// The outbox holds named queues beside the bus's (Message.Queue; schema 3):
// the node's store-and-forward of messages to agents that are down shares
// the file with the bus, and each reads only its own queue (DueIn,
// NextDueIn, WakeIn, PendingIn) through a due index of its own. A dead
// letter keeps its queue, so Replay puts it back where it came from, and
// Signal tells the queue's consumer. EnqueueWithin bounds a named queue
// (messages per recipient, bytes in total, a running count in the meta
// bucket) and refuses a message past them with ErrFull, in the same
// transaction as the write. A recipient that fetched a message and left
// it for later says so (MarkLeft: Message.Left, the first time kept;
// schema 4), and
// EnqueueDisplacing lets a message its recipient's bounds refuse take the
// place of messages left long enough, from the sender that holds the
// most, deleted in the same transaction and returned to the caller; a
// message its recipient has not left is never displaced.
//
// # History
//
// Record is idempotent on the message id (at-least-once delivery must not
// duplicate history). History is keyed by big-endian time ‖ id, and three
// index buckets, by agent (From and To), topic and conversation, are keyed
// by value ‖ 0x00 ‖ time ‖ id. Indexed values may not contain NUL, so the
// first NUL ends the value and "ab" never matches "abc". A query reads
// through one index, newest first, and stops when its page is full; a topic
// prefix query ("inbound:*") reads the index entries of the matching topics
// and sorts them. (History patterns are only exact or trailing-'*'
// prefixes, not the bus's fnmatch patterns.) Paging uses
// HistoryQuery.Before: the id of the last message of the previous page. Times are encoded with the sign bit flipped
// so that byte order is time order, and must lie in the years 1678-2262
// (time.Time.UnixNano's range).
//
// Every history key starts with a time or, in history_ids, an id, and
// NewID's ids start with the time they were made: records arrive in about
// time order, so each bucket grows at its right edge (the indexes at the
// right edge of each value's range) and a commit rewrites a few pages
// there rather than one page per record scattered through the tree. Those
// buckets split pages at 90% full (bbolt's default is half), since a
// split page is not written into again. RecordAll writes many records in
// one transaction, for a writer that has a batch at hand.
//
// Prune deletes history older than the retention (WithRetention, seven
// days by default, as seed 004 asks) with its index entries, in bounded
// transactions; a pruner goroutine owned by the Store runs it every
// WithPruneInterval and stops in Close. History is also bounded in size
// (WithMaxHistoryBytes, 256 MiB by default): a Record that takes it past
// the cap deletes the oldest records in its own transaction, and the
// meta bucket keeps the running size so that the check costs no scan.
//
// # Kept messages and durable positions
//
// A history keeper's topic messages are kept (Keep) verbatim in bucket
// kept, keyed stream ‖ 0x00 ‖ time ‖ key, so that Kept reads one stream
// (a topic family) oldest first from a cursor (the hex of the last
// time ‖ key returned) and filters topics with the caller's Match. An
// age index (kept_age: time ‖ stream ‖ 0x00 ‖ key) lets PruneKept (run by
// the pruner with Prune; WithKeptRetention, seven days) and the size
// bound (WithMaxKeptBytes, 128 MiB, kept in the meta bucket like the
// history's) delete the oldest first. Keep is idempotent on (stream,
// time, key). Bucket durables holds each durable subscription's position
// (SaveDurable, Durable, DeleteDurable; Durables lists the names and
// their positions' sizes), an opaque value its owner
// encodes, of at most MaxDurableSize, for at most WithMaxDurables names
// (256 by default): a new name past it is ErrFull. Positions never
// expire, since a subscriber may be away for long; their owner deletes
// the ones no longer needed.
//
// # Tokens
//
// The store never writes a lobby auth token, only its SHA-256: a stolen or
// backed-up store file does not let anyone act as a registered agent.
// This relies on the lobby issuing tokens as random values with at least
// 122 bits of entropy (a random UUID, as seed 000 §6 describes): against
// such tokens an unsalted fast hash is enough, and a slow
// password hash would only slow every lobby message. RegistrationByToken
// finds the registration through an index on the hash and compares the
// stored hash with the computed one in constant time; the index lookup's
// timing can only reveal bits of a hash, which do not help to forge a
// token. A Registration read back has an empty Token.
//
// # Records and corruption
//
// Values are a format-version byte followed by JSON; payload and metadata
// bytes are stored verbatim (base64 inside the JSON), never re-encoded, so
// signed payloads survive byte for byte. Payload must be valid JSON and
// metadata empty or valid JSON; payload plus metadata may not exceed
// WithMaxRecordSize (1 MiB by default). A value or key that cannot be
// decoded yields a *CorruptError naming its bucket and key (matched by
// errors.Is(err, ErrCorrupt)); the store never panics on stored bytes.
//
// # Contexts and closing
//
// bbolt transactions cannot be interrupted, so a method checks its context
// before it starts, and long scans (History, Prune) check it as they go.
// After Close every method returns ErrClosed; Close waits for methods in
// progress and for the pruner.
//
// # Configuration
//
// Open takes options (options.go): defaults, then the options in order,
// then one validation of the whole; a refused configuration wraps
// ErrInvalidConfig and creates no file. Without WithLogger the store logs
// to slog.Default(). WithMetrics times writes until they are on disk and
// reads the file's size, the outbox's depth and the dead letters at each
// scrape.
//
// store imports nothing of meshagent; relay and node import it.
package store
