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

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/wstest"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// A whole-path fuzz target: fuzzed frames go into a live lobby over a
// real WebSocket (after a real REGISTER), through decoding, dispatch and
// the handlers, against a fake mesh and a real store.

// fuzzAgent is the fake mesh's own agent id (a fixed Ed25519 key).
const fuzzAgent = fakemesh.SelfID

var _ Discoverer = fakemesh.Instant{}

// fuzzConn is a raw WebSocket client of the fuzz target.
type fuzzConn struct{ *wstest.Conn }

func dialFuzz(t *testing.T, url string) fuzzConn { return fuzzConn{wstest.Dial(t, url)} }

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
	l, err := New(fakemesh.Instant{}, st, WithRequestTimeout(500*time.Millisecond), WithMaxRegistrations(1<<30),
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
	honest := fuzzConn{wstest.Dial(f, fl.url)}
	fl.honest = honest.WS
	if _, err := honest.register("honest_agent", ""); err != nil {
		f.Fatal(err)
	}
	return fl
}

// register REGISTERs c as id (re-registering with token if it is not
// "") with one capability and returns the new token.
func (c fuzzConn) register(id, token string) (string, error) {
	c.TB.Helper()
	c.Write([]byte(`{"sender_id":"` + id + `","receiver_id":"` + DefaultID + `","message_type":"REGISTER","auth_token":"` + token + `","payload":{"capabilities":[{"name":"fuzz_echo","description":"echo"}]}}`))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b := c.Read(ctx)
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
func (c fuzzConn) untilSentinel(within time.Duration, input []byte) []lobbyOut {
	c.TB.Helper()
	c.Write([]byte(`{"message_type":"` + lobbySentinel + `"}`))
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var got []lobbyOut
	for {
		b := c.Read(ctx)
		if _, err := ParseMessage(b); err != nil {
			c.TB.Fatalf("the lobby sent what it would not accept %s: %v", b, err)
		}
		var m lobbyOut
		if err := json.Unmarshal(b, &m); err != nil {
			c.TB.Fatalf("undecodable %s: %v", b, err)
		}
		if m.MessageType == TypeError {
			var p ErrorPayload
			if err := json.Unmarshal(m.Payload, &p); err != nil || p.Error == "" || p.Code == "" {
				c.TB.Fatalf("ERROR without error and code: %s", b)
			}
			if p.Code == protocol.CodeInternalError {
				c.TB.Fatalf("INTERNAL_ERROR (a handler failed or panicked) for %q: %s", input, b)
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
		c.Write(in)
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
		fuzzConn{&wstest.Conn{TB: t, WS: fl.honest}}.untilSentinel(2*time.Second, nil)
	})
}
