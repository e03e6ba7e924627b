package relay

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/rpc"
)

// The helpers of the lobby's whole-path fuzz target (the bus's, which
// shared them, are in package bus).

// fuzzAgent is the fake mesh's own agent id (a fixed Ed25519 key).
const fuzzAgent = "12D3KooWNmhA9NDeN7QxmnSy3XCuggwjKdFUFur6oAez2Kaioh4a"

// fuzzMesh answers everything at once, successfully.
type fuzzMesh struct{}

var (
	_ rpc.Publisher  = fuzzMesh{}
	_ rpc.Discoverer = fuzzMesh{}
)

func (fuzzMesh) AgentID() string { return fuzzAgent }

func (fuzzMesh) Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &protocol.Response{CorrelationID: req.CorrelationID, Status: protocol.StatusSuccess, Result: json.RawMessage(`{"ok":true}`)}, nil
}

func (fuzzMesh) Peers() []protocol.PeerInfo {
	return []protocol.PeerInfo{{AgentID: fuzzAgent, Name: "self", Connected: true}}
}

func (fuzzMesh) Publish(context.Context, string, json.RawMessage, *protocol.Filter) (int, error) {
	return 1, nil
}

func (fuzzMesh) PublishID(context.Context, string, string, json.RawMessage, *protocol.Filter) (int, error) {
	return 1, nil
}

func (fuzzMesh) Subscribe(string, func(protocol.TopicMessage)) (func(), error) { return func() {}, nil }

func (fuzzMesh) Discover(context.Context, string, bool) (<-chan protocol.PeerInfo, error) {
	ch := make(chan protocol.PeerInfo)
	close(ch)
	return ch, nil
}

// fuzzConn is a raw WebSocket client of a fuzz target.
type fuzzConn struct {
	t  testing.TB
	ws *websocket.Conn
}

func dialFuzz(t *testing.T, url string) *fuzzConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(32 << 20)
	t.Cleanup(func() { _ = ws.CloseNow() })
	return &fuzzConn{t: t, ws: ws}
}

func (c *fuzzConn) write(frame []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, frame); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *fuzzConn) read(ctx context.Context) []byte {
	c.t.Helper()
	_, b, err := c.ws.Read(ctx)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return b
}
