package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/goleak"

	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/relay"
)

var update = flag.Bool("update", false, "rewrite the expected lines of testdata transcripts")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeMesh answers calls without any network.
type fakeMesh struct {
	block chan struct{}
}

func (fakeMesh) AgentID() string { return "12D3KooWFake" }

func (fakeMesh) Peers() []protocol.PeerInfo {
	return []protocol.PeerInfo{{AgentID: "12D3KooWPeer", Name: "peer", Capabilities: []protocol.Capability{{Name: "echo"}}, Addrs: []string{}}}
}

func (f fakeMesh) Call(ctx context.Context, req protocol.CallRequest) (*protocol.Response, error) {
	switch req.Action {
	case "echo":
		return &protocol.Response{CorrelationID: "c-1", Status: protocol.StatusSuccess, Result: req.Params}, nil
	case "private":
		return nil, protocol.Errorf(protocol.CodeUnauthorized, "agent X is not authorized to call capability private")
	case "steps":
		for i := 1; i <= 2; i++ {
			req.Progress(&protocol.Response{CorrelationID: "c-1", Status: protocol.StatusInProgress, Result: json.RawMessage(fmt.Sprintf(`{"step":%d}`, i))})
		}
		return &protocol.Response{CorrelationID: "c-1", Status: protocol.StatusSuccess, Result: json.RawMessage(`{"done":true}`)}, nil
	case "block":
		select {
		case <-f.block:
		case <-ctx.Done():
		}
		return nil, ctx.Err()
	default:
		return nil, protocol.Errorf(protocol.CodeCapabilityNotSupported, "agent does not support %s capability", req.Action).
			WithDetails(map[string]any{"requested": req.Action, "available": []string{"echo", "private", "steps"}})
	}
}

func startServer(t *testing.T, opts ...relay.Option) (*relay.Server, string) {
	t.Helper()
	srv, err := relay.New(fakeMesh{block: make(chan struct{})}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return srv, "ws://" + l.Addr().String() + "/"
}

func dialRaw(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(16 << 20)
	t.Cleanup(func() { _ = ws.CloseNow() })
	return ws
}

func send(t *testing.T, ws *websocket.Conn, msg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ws.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		t.Fatal(err)
	}
}

func recv(t *testing.T, ws *websocket.Conn, d time.Duration) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	_, b, err := ws.Read(ctx)
	return string(b), err
}

// TestTranscripts replays testdata/*.txt against a server with a fake mesh.
// A notification line is followed by a ping so that "no answer" is checked
// by the ping's answer arriving first.
func TestTranscripts(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.txt")
	if len(files) == 0 {
		t.Fatal("no transcripts")
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			_, url := startServer(t)
			ws := dialRaw(t, url)
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			lines := strings.Split(string(data), "\n")
			for i := 0; i < len(lines); i++ {
				line := lines[i]
				if !strings.HasPrefix(line, "--> ") {
					if !strings.HasPrefix(line, "<-- ") {
						out = append(out, line)
					}
					continue
				}
				out = append(out, line)
				send(t, ws, strings.TrimPrefix(line, "--> "))
				var want []string
				for i+1 < len(lines) && strings.HasPrefix(lines[i+1], "<-- ") {
					i++
					want = append(want, strings.TrimPrefix(lines[i], "<-- "))
				}
				if len(want) == 0 {
					// Expect silence: a marker request must be answered next.
					send(t, ws, `{"jsonrpc":"2.0","id":"marker","method":"mesh.id"}`)
					got, err := recv(t, ws, 10*time.Second)
					if err != nil || !strings.Contains(got, `"id":"marker"`) {
						t.Fatalf("line %d: expected no answer, got %s (%v)", i+1, got, err)
					}
					continue
				}
				for _, w := range want {
					got, err := recv(t, ws, 10*time.Second)
					if err != nil {
						t.Fatalf("line %d: %v", i+1, err)
					}
					out = append(out, "<-- "+got)
					if !*update && !jsonEqual(got, w) {
						t.Errorf("line %d:\n got  %s\n want %s", i+1, got, w)
					}
				}
			}
			if *update {
				if err := os.WriteFile(file, []byte(strings.Join(out, "\n")), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal([]byte(b), &y) != nil {
		return a == b
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

func TestPing(t *testing.T) {
	_, url := startServer(t)
	c, err := relay.Dial(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var res struct {
		Timestamp string `json:"timestamp"`
	}
	if err := c.Call(context.Background(), "ping", map[string]any{}, &res); err != nil {
		t.Fatal(err)
	}
	if _, err := time.Parse(time.RFC3339, res.Timestamp); err != nil {
		t.Fatalf("timestamp %q: %v", res.Timestamp, err)
	}
}

func TestClientMeshCall(t *testing.T) {
	_, url := startServer(t)
	c, err := relay.Dial(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	var steps []string
	resp, err := c.MeshCall(ctx, protocol.CallRequest{To: "A", Action: "steps"}, func(r *protocol.Response) { steps = append(steps, string(r.Result)) })
	if err != nil {
		t.Fatal(err)
	}
	if string(resp.Result) != `{"done":true}` || strings.Join(steps, ",") != `{"step":1},{"step":2}` {
		t.Fatalf("result %s steps %v", resp.Result, steps)
	}
	_, err = c.MeshCall(ctx, protocol.CallRequest{To: "A", Action: "missing"}, nil)
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeCapabilityNotSupported || !strings.Contains(string(pe.Details), `"available"`) {
		t.Fatalf("error %v", err)
	}
	peers, err := c.Peers(ctx)
	if err != nil || len(peers) != 1 || peers[0].Name != "peer" {
		t.Fatalf("peers %v %v", peers, err)
	}
}

func TestDialNoServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = relay.Dial(context.Background(), "ws://"+addr+"/")
	if !errors.Is(err, relay.ErrNoServer) {
		t.Fatalf("got %v, want ErrNoServer", err)
	}
}

func TestOversizeMessageClosesOnlyThatClient(t *testing.T) {
	lim := relay.DefaultLimits()
	lim.MaxMessageBytes = 4096
	_, url := startServer(t, relay.WithLimits(lim))
	bad := dialRaw(t, url)
	good := dialRaw(t, url)
	send(t, bad, `{"jsonrpc":"2.0","id":1,"method":"mesh.id","params":{"pad":"`+strings.Repeat("x", 8192)+`"}}`)
	if _, err := recv(t, bad, 10*time.Second); websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("oversize client: %v, want close status 1009", err)
	}
	send(t, good, `{"jsonrpc":"2.0","id":1,"method":"mesh.id"}`)
	if got, err := recv(t, good, 10*time.Second); err != nil || !strings.Contains(got, "12D3KooWFake") {
		t.Fatalf("other client: %s %v", got, err)
	}
}

func TestSlowClientDisconnected(t *testing.T) {
	lim := relay.DefaultLimits()
	lim.SendQueue = 4
	lim.WriteTimeout = 200 * time.Millisecond
	srv, url := startServer(t, relay.WithLimits(lim))
	// The slow client floods requests and never reads its answers, so its
	// TCP window fills and the server's writes to it stall.
	ws := dialRaw(t, url)
	big := `{"jsonrpc":"2.0","id":1,"method":"mesh.peers"}`
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			if err := ws.Write(ctx, websocket.MessageText, []byte(big)); err != nil {
				return
			}
		}
	}()
	good, err := relay.Dial(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	deadline := time.Now().Add(15 * time.Second)
	for srv.Clients() != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("slow client still connected (%d clients)", srv.Clients())
		}
		var id map[string]string
		if err := good.Call(context.Background(), "mesh.id", nil, &id); err != nil {
			t.Fatalf("good client stalled: %v", err)
		}
	}
}

func TestServerBusy(t *testing.T) {
	lim := relay.DefaultLimits()
	lim.MaxConcurrentCalls = 1
	_, url := startServer(t, relay.WithLimits(lim))
	ws := dialRaw(t, url)
	send(t, ws, `{"jsonrpc":"2.0","id":1,"method":"mesh.call","params":{"agentId":"A","capability":"block"}}`)
	send(t, ws, `{"jsonrpc":"2.0","id":2,"method":"mesh.id"}`)
	got, err := recv(t, ws, 10*time.Second)
	if err != nil || !strings.Contains(got, `-32005`) {
		t.Fatalf("got %s %v", got, err)
	}
}

func TestNotFoundPath(t *testing.T) {
	srv, err := relay.New(fakeMesh{})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	hs := httptest.NewServer(srv)
	defer hs.Close()
	_, _, err = websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(hs.URL, "http")+"/nope", nil)
	if err == nil {
		t.Fatal("dial to an unknown path succeeded")
	}
}

func FuzzDecodeRequest(f *testing.F) {
	data, _ := os.ReadFile("testdata/jsonrpc.txt")
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "--> ") {
			f.Add([]byte(strings.TrimPrefix(line, "--> ")))
		}
	}
	srv, err := relay.New(fakeMesh{block: make(chan struct{})})
	if err != nil {
		f.Fatal(err)
	}
	defer srv.Close()
	f.Fuzz(func(t *testing.T, msg []byte) {
		r := relay.DecodeForTest(msg)
		for _, b := range r {
			if !json.Valid(b) {
				t.Fatalf("invalid JSON answer %q", b)
			}
		}
	})
}
