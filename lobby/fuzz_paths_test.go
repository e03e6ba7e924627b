package lobby

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// A whole-path fuzz target: fuzzed frames go into a live lobby over a
// real WebSocket (after a real REGISTER), through decoding, dispatch and
// the handlers, against a fake mesh and a real store.

// fuzzAgent is the fake mesh's own agent id (a fixed Ed25519 key).
const fuzzAgent = "12D3KooWNmhA9NDeN7QxmnSy3XCuggwjKdFUFur6oAez2Kaioh4a"

// fuzzMesh answers every call at once, successfully, and finds nothing.
type fuzzMesh struct{}

func (fuzzMesh) AgentID() string { return fuzzAgent }

func (fuzzMesh) Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &protocol.Response{CorrelationID: req.CorrelationID, Status: protocol.StatusSuccess, Result: json.RawMessage(`{"ok":true}`)}, nil
}

func (fuzzMesh) Discover(context.Context, string, bool) (<-chan protocol.PeerInfo, error) {
	ch := make(chan protocol.PeerInfo)
	close(ch)
	return ch, nil
}

var _ Discoverer = fuzzMesh{}

// fuzzConn is a raw WebSocket client of the fuzz target.
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

// fuzzLobby is a live lobby with a store and an honest registered agent.
type fuzzLobby struct {
	url    string
	honest *websocket.Conn
	// agent and token are the fuzzed connection's registration, renewed
	// by each REGISTER (fuzz functions run one at a time per process).
	agent, token string
	n            int
}

// lobbyOut is one lobby message the lobby sent, decoded loosely.
type lobbyOut struct {
	MessageType string          `json:"message_type"`
	Payload     json.RawMessage `json:"payload"`
}

func newFuzzLobby(f *testing.F) *fuzzLobby {
	f.Helper()
	st, err := store.Open(filepath.Join(f.TempDir(), "lobby.db"))
	if err != nil {
		f.Fatal(err)
	}
	l, err := New(fuzzMesh{}, st, WithRequestTimeout(500*time.Millisecond), WithMaxRegistrations(1<<30),
		WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		f.Fatal(err)
	}
	hs := httptest.NewServer(l)
	fl := &fuzzLobby{url: "ws" + strings.TrimPrefix(hs.URL, "http") + "/lobby"}
	f.Cleanup(func() {
		_ = l.Close()
		hs.Close()
		_ = st.Close()
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, fl.url, nil)
	if err != nil {
		f.Fatal(err)
	}
	fl.honest = ws
	if _, err := (&fuzzConn{t: f, ws: ws}).register("honest_agent", ""); err != nil {
		f.Fatal(err)
	}
	return fl
}

// register REGISTERs c as id (re-registering with token if it is not
// "") with one capability and returns the new token.
func (c *fuzzConn) register(id, token string) (string, error) {
	c.t.Helper()
	c.write([]byte(`{"sender_id":"` + id + `","receiver_id":"` + DefaultID + `","message_type":"REGISTER","auth_token":"` + token + `","payload":{"capabilities":[{"name":"fuzz_echo","description":"echo"}]}}`))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b := c.read(ctx)
	var m lobbyOut
	if err := json.Unmarshal(b, &m); err != nil || m.MessageType != TypeRegisterAck {
		return "", fmt.Errorf("REGISTER %s: %s", id, b)
	}
	var ack RegisterAckPayload
	if err := json.Unmarshal(m.Payload, &ack); err != nil || ack.AuthToken == "" {
		return "", fmt.Errorf("REGISTER_ACK %s: %v", m.Payload, err)
	}
	return ack.AuthToken, nil
}

// lobbySentinel is a message type the lobby answers with an ERROR on the
// connection's read loop, after everything sent before it was handled
// there.
const lobbySentinel = "FUZZ_SENTINEL"

// untilSentinel sends the sentinel and reads until its ERROR, checking
// every message the lobby sends: a lobby message, and no INTERNAL_ERROR.
func (c *fuzzConn) untilSentinel(within time.Duration, input []byte) []lobbyOut {
	c.t.Helper()
	c.write([]byte(`{"message_type":"` + lobbySentinel + `"}`))
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var got []lobbyOut
	for {
		b := c.read(ctx)
		if _, err := ParseMessage(b); err != nil {
			c.t.Fatalf("the lobby sent what it would not accept %s: %v", b, err)
		}
		var m lobbyOut
		if err := json.Unmarshal(b, &m); err != nil {
			c.t.Fatalf("undecodable %s: %v", b, err)
		}
		if m.MessageType == TypeError {
			var p ErrorPayload
			if err := json.Unmarshal(m.Payload, &p); err != nil || p.Error == "" || p.Code == "" {
				c.t.Fatalf("ERROR without error and code: %s", b)
			}
			if p.Code == protocol.CodeInternalError {
				c.t.Fatalf("INTERNAL_ERROR (a handler failed or panicked) for %q: %s", input, b)
			}
			if p.OriginalMessageType == lobbySentinel {
				return got
			}
		}
		got = append(got, m)
	}
}

// FuzzLobby drives fuzzed lobby messages through a live lobby connection,
// before and after a real REGISTER ("$TOKEN" and "$ID" in the input are
// replaced by the registered agent's token and id, so that frames get
// past the token check): no INTERNAL_ERROR (a recovered panic), every
// message sent back is a well-formed lobby message, at most one answer
// to a REGISTER, and the honest agent on another connection is still
// answered within 2 s.
func FuzzLobby(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for line := range strings.SplitSeq(string(src), "\n") {
			if _, frame, ok := strings.Cut(line, " --> "); ok {
				f.Add([]byte(frame), false)
				f.Add([]byte(frame), true)
			}
		}
	}
	for _, s := range []string{
		`{"sender_id":"$ID","receiver_id":"fuzz_agent","message_type":"REQUEST","conversation_id":"c1","auth_token":"$TOKEN","payload":{"capability_name":"fuzz_echo","params":{}}}`,
		`{"sender_id":"$ID","receiver_id":"` + fuzzAgent + `","message_type":"REQUEST","conversation_id":"c2","auth_token":"$TOKEN","payload":{"capability_name":"echo"}}`,
		`{"sender_id":"$ID","message_type":"DISCOVER_SERVICES","auth_token":"$TOKEN","payload":{"capability_name":"fuzz_echo"}}`,
		`{"sender_id":"$ID","message_type":"DISCOVER_SERVICES","auth_token":"$TOKEN","payload":{"query_keywords":["echo"]}}`,
		`{"sender_id":"$ID","message_type":"DISCOVER_SERVICES","auth_token":"$TOKEN","payload":{"capability_name":5}}`,
		`{"sender_id":"$ID","receiver_id":"x","message_type":"RESPONSE","conversation_id":"c1","auth_token":"$TOKEN","payload":{"status":"success","result":{}}}`,
		`{"sender_id":"$ID","receiver_id":"x","message_type":"RESPONSE","conversation_id":"c1","auth_token":"$TOKEN","payload":{"status":7}}`,
		`{"sender_id":"$ID","message_type":"ERROR","auth_token":"$TOKEN","payload":{"error":"e","code":5}}`,
		`{"sender_id":"$ID","message_type":"REGISTER","payload":{"capabilities":[{"name":"a","input_schema":{"type":7}}]}}`,
		`{"sender_id":"$ID","message_type":"REGISTER","payload":{"capabilities":"x"}}`,
		`{"sender_id":5,"message_type":"REQUEST","auth_token":"$TOKEN","payload":{}}`,
	} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	fl := newFuzzLobby(f)
	f.Fuzz(func(t *testing.T, frame []byte, registered bool) {
		if bytes.Contains(frame, []byte(lobbySentinel)) {
			return
		}
		c := dialFuzz(t, fl.url)
		token, agent := "no-token", "fuzz_agent"
		if registered {
			var err error
			if fl.token != "" {
				token, err = c.register(fl.agent, fl.token)
			}
			if fl.token == "" || err != nil { // the input re-registered it last time
				fl.n++
				fl.agent = fmt.Sprintf("fuzz_agent_%d", fl.n)
				if token, err = c.register(fl.agent, ""); err != nil {
					t.Fatal(err)
				}
			}
			fl.token, agent = token, fl.agent
		}
		in := bytes.ReplaceAll(frame, []byte("$TOKEN"), []byte(token))
		in = bytes.ReplaceAll(in, []byte("$ID"), []byte(agent))
		c.write(in)
		got := c.untilSentinel(10*time.Second, frame)
		acks := 0
		for _, m := range got {
			if m.MessageType == TypeRegisterAck {
				acks++
			}
		}
		if acks > 1 {
			t.Fatalf("%d REGISTER_ACKs for one frame", acks)
		}
		(&fuzzConn{t: t, ws: fl.honest}).untilSentinel(2*time.Second, nil)
	})
}
