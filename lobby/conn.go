package lobby

import (
	"context"
	"log/slog"
	"runtime/debug"

	"github.com/meshagent/meshagent/internal/wsconn"
	"github.com/meshagent/meshagent/protocol"
)

// conn is one lobby client connection: the wsconn.Conn that carries it
// (its send queue, writer, pinger, jobs, init deadline and close) and the
// agent it serves. Messages are handled one at a time on the read loop;
// a REQUEST or DISCOVER_SERVICES that waits runs as a job of the
// connection (spawn), at most Limits.MaxConcurrentCalls at once.
type conn struct {
	l   *Lobby
	ws  *wsconn.Conn
	ctx context.Context // ends when the connection starts closing
	log *slog.Logger

	// agent is the agent id this connection serves, "" until a REGISTER
	// or a message with a valid auth_token binds it. Guarded by l.mu.
	agent string
}

func newConn(l *Lobby, ws *wsconn.Conn) *conn {
	return &conn{l: l, ws: ws, ctx: ws.Context(), log: ws.Logger()}
}

// sendMsg encodes and queues m without blocking. A full queue disconnects
// the client: the lobby never waits for a slow reader.
func (c *conn) sendMsg(m *Message) error {
	b, err := encodeMessage(m)
	if err != nil {
		c.log.Error("encode lobby message", "type", m.MessageType, "err", err)
		return err
	}
	return c.ws.Send(b)
}

// spawn runs f as a job of the connection if a slot is free, and reports
// whether it did.
func (c *conn) spawn(f func()) bool {
	// The job's place is held until it returns, answer included (it is
	// sent from deep inside f): a client that keeps all of
	// MaxConcurrentCalls in flight, and sends the next the moment an
	// answer comes, may be refused one with RATE_LIMITED.
	return c.ws.Go(func(func()) { f() })
}

// establish marks the connection as serving an agent: it is no longer
// closed by the register deadline or evicted to make room.
func (c *conn) establish() { c.ws.Establish() }

// handle serves one message on the read loop, turning a panic into an
// ERROR for the sender: one bad message never ends the connection.
func (c *conn) handle(frame []byte) {
	defer func() {
		if p := recover(); p != nil {
			c.log.Error("lobby message handler panicked", "panic", p, "stack", string(debug.Stack()))
			c.l.sendError(c, nil, protocol.Errorf(protocol.CodeInternalError, "internal error"))
		}
	}()
	c.l.handleFrame(c, frame)
}
