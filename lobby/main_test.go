package lobby_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/internal/wstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The fake mesh's agent ids, which the transcripts name.
const (
	selfID  = fakemesh.SelfID
	peerID  = fakemesh.PeerID
	peerB64 = fakemesh.PeerB64
)

// testTimeout bounds every wait in these tests.
const testTimeout = wstest.Timeout

// dialRaw opens a WebSocket to the lobby at url.
func dialRaw(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	return wstest.Dial(t, url).WS
}

// The shared helpers under the short names these tests use.
var (
	writeFrame   = wstest.WriteFrame
	readFrame    = wstest.ReadFrame
	expectClosed = wstest.ExpectClosed
)

// receive waits for one value on ch, or fails the test.
func receive[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	return wait.Receive(t, testTimeout, ch, what)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// compact returns s as compact JSON, or s itself if it is not JSON.
func compact(s string) string {
	var buf bytes.Buffer
	if err := json.Compact(&buf, []byte(s)); err != nil {
		return s
	}
	return buf.String()
}
