// Package wsconn is the WebSocket plumbing shared by meshagent's
// listeners (the JSON-RPC server and the seed 000 lobby): admission,
// upgrade, one bounded send queue per connection drained by one writer,
// keep-alive pings, an orderly or abrupt close, and the wait for every
// goroutine a connection started. What the messages mean is the caller's
// business; wsconn moves bytes and enforces Limits.
//
// # Hub and Conn
//
// A Hub is one listener's set of connections. Hub.Serve checks the
// request's origin, reserves a slot (see admission below), upgrades to a
// WebSocket, asks the caller for a Handler, and runs the read loop on the
// HTTP handler's goroutine until the connection ends. Hub.Close closes
// every connection (status 1001) and waits for all of them.
//
// A Conn's goroutines: the read loop, one writer, one pinger when
// Limits.PingInterval > 0, and one per job started with Conn.Go (at most
// Limits.MaxConcurrentCalls run at once). A job's goroutine, once the job
// has returned, waits briefly for the connection's next job and runs it
// (package workers), so a busy connection does not start a goroutine and
// grow its stack for every request. The read loop starts the others and,
// when the connection ends, waits for them, then runs Handler.Ended, then
// gives the slot back. Hub.Close waits for the read loops.
//
// # Back-pressure
//
// Conn.Send never blocks. Outgoing messages wait in a queue of
// Limits.SendQueue; a full queue, or a write that misses
// Limits.WriteTimeout, disconnects the client (1008 "slow consumer"): a
// listener never waits for a slow reader. A client that stops answering
// pings within Limits.PingInterval is disconnected too. A sender that
// must hold back instead (a durable subscription's catch-up) waits for
// the client's answer to each message rather than for room in the queue.
//
// # Bursts
//
// The WebSocket library flushes each message with a write system call of
// its own. The writer, woken by a message, yields once so that the rest
// of a burst (a fan-out to many subscribers, many answers) can queue, then
// writes everything queued by then under a BatchConn, which holds the
// flushes back and sends the burst in one system call. Each message is
// still a WebSocket message of its own, so clients see no difference. A
// client (package rpc's) can put a BatchConn under its dialled
// connection for its own bursts. A burst is bounded by the connection's
// write deadline, set once for it, rather than by a context handed to the
// library, which would arm a timer for every message. A Reader reads the
// messages through a buffer kept between them.
//
// # Closing
//
// An orderly close (Conn.Close, Hub.Close, an eviction, the init
// deadline) lets the writer drain what is queued within one WriteTimeout
// and then runs the closing handshake, bounded by WriteTimeout (or by one
// second for a connection closed for holding a slot), after which the raw
// connection is closed under it. An abrupt close (slow consumer, ping
// timeout, read or write failure, oversize message) drops the connection
// at once. The read loop never reads with a cancellable context: the
// writer's close is what ends it.
//
// # Admission
//
// A connection is "waiting" from its arrival until the caller calls
// Conn.Establish (after initialize on the JSON-RPC server, once an agent
// is attached on the lobby). A full Hub evicts its oldest waiting
// connection to make room, and refuses (HTTP 503) only when every slot
// holds an established one; an IP address over Limits.MaxClientsPerIP
// does the same among its own connections (HTTP 429). A connection still
// waiting after Limits.InitTimeout, with no job of its own running, is
// closed with 1008 and Config.InitDeadline as the reason.
package wsconn
