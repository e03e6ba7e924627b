package wsconn

import (
	"bytes"
	"context"

	"github.com/coder/websocket"
)

// maxKeptRead bounds the read buffer a Reader keeps between messages: a
// connection that once read a large message does not pin its size.
const maxKeptRead = 16 << 10

// Reader reads a connection's messages through a buffer it keeps, and
// hands each out as a copy of its exact size. websocket.Conn.Read starts
// every message in a fresh buffer of 512 bytes and grows it: most of the
// garbage of a busy connection. A Reader belongs to one read loop.
type Reader struct {
	buf bytes.Buffer
}

// Read reads the next message from ws as websocket.Conn.Read does.
func (r *Reader) Read(ctx context.Context, ws *websocket.Conn) (websocket.MessageType, []byte, error) {
	typ, mr, err := ws.Reader(ctx)
	if err != nil {
		return 0, nil, err
	}
	r.buf.Reset()
	_, err = r.buf.ReadFrom(mr)
	b := bytes.Clone(r.buf.Bytes())
	if r.buf.Cap() > maxKeptRead {
		r.buf = bytes.Buffer{}
	}
	return typ, b, err
}
