package wstest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Timeout bounds every dial, write and read of this package.
const Timeout = 10 * time.Second

// readLimit is above the listeners' largest frame, so that a test sees the
// server's answer to an oversized request rather than its own refusal.
const readLimit = 32 << 20

// Conn is a raw WebSocket client that fails TB on any error.
type Conn struct {
	TB testing.TB
	WS *websocket.Conn
}

// Dial opens a WebSocket to url, closed at the end of the test.
func Dial(tb testing.TB, url string) *Conn {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	ws.SetReadLimit(readLimit)
	tb.Cleanup(func() { _ = ws.CloseNow() })
	return &Conn{TB: tb, WS: ws}
}

// Write sends frame as one text message.
func (c *Conn) Write(frame []byte) {
	c.TB.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := c.WS.Write(ctx, websocket.MessageText, frame); err != nil {
		c.TB.Fatalf("write %s: %v", frame, err)
	}
}

// Read returns the next message, waiting until ctx ends.
func (c *Conn) Read(ctx context.Context) []byte {
	c.TB.Helper()
	_, b, err := c.WS.Read(ctx)
	if err != nil {
		c.TB.Fatalf("read: %v", err)
	}
	return b
}

// Next returns the next message, waiting at most Timeout.
func (c *Conn) Next() []byte {
	c.TB.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	return c.Read(ctx)
}

// WriteFrame sends frame on ws as one text message.
func WriteFrame(tb testing.TB, ws *websocket.Conn, frame string) {
	tb.Helper()
	(&Conn{TB: tb, WS: ws}).Write([]byte(frame))
}

// ReadFrame returns the next message on ws, waiting at most Timeout.
func ReadFrame(tb testing.TB, ws *websocket.Conn) string {
	tb.Helper()
	return string((&Conn{TB: tb, WS: ws}).Next())
}

// ExpectClosed reads from ws until the server closes it, and checks that
// it did so within the given time with status 1008 (policy violation) and
// a reason containing want: how the listeners turn away a connection.
func ExpectClosed(tb testing.TB, ws *websocket.Conn, within time.Duration, want string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		_, _, err := ws.Read(ctx)
		if err == nil {
			continue
		}
		var ce websocket.CloseError
		if !errors.As(err, &ce) {
			tb.Fatalf("connection not closed by the server within %v: %v", within, err)
		}
		if ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, want) {
			tb.Fatalf("closed with %d %q, want 1008 with %q", ce.Code, ce.Reason, want)
		}
		return
	}
}
