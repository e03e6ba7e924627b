package rpc

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
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/internal/wstest"
	"github.com/meshagent/meshagent/protocol"
)

// Whole-path fuzz targets: fuzzed frames go into a live server over a real
// WebSocket (after a real initialize), through decoding, dispatch and the
// method handlers, against a fake mesh. Each checks the answers, that nothing panicked (a
// recovered panic is answered -32603 or INTERNAL_ERROR, which no input
// may earn here), and that an honest client on another connection is
// still answered.

// fuzzAgent is the fake mesh's own agent id (a fixed Ed25519 key).
const fuzzAgent = fakemesh.SelfID

// fakemesh.Instant offers every optional part of the mesh, so that every method
// reaches its params decoding.
var _ Publisher = fakemesh.Instant{}

// fuzzProvider lets the fuzzed clients serve: it accepts every offer.
type fuzzProvider struct{}

func (fuzzProvider) Offer([]protocol.Capability, TaskHandler) error { return nil }

func (fuzzProvider) OnMessage(MessageHandler) {}

func (fuzzProvider) SendMessage(context.Context, string, protocol.AgentMessage) (json.RawMessage, error) {
	return json.RawMessage(`{"ok":true}`), nil
}

// fuzzServer is a live server with an honest, initialized client.
type fuzzServer struct {
	url    string
	honest *Client
	n      atomic.Int64
}

func newFuzzServer(f testing.TB) *fuzzServer {
	f.Helper()
	return newFuzzServerOn(f, fakemesh.Instant{}, WithTopics(fakemesh.Instant{}), WithProvider(fuzzProvider{}))
}

// newFuzzServerOn is newFuzzServer on the mesh given, with opts.
func newFuzzServerOn(f testing.TB, mesh Mesh, opts ...Option) *fuzzServer {
	f.Helper()
	srv, err := New(mesh, append([]Option{WithLogger(slog.New(slog.DiscardHandler))}, opts...)...)
	if err != nil {
		f.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	fb := &fuzzServer{url: "ws" + strings.TrimPrefix(hs.URL, "http") + "/"}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fb.honest, err = Dial(ctx, fb.url, WithClientID("honest"), WithClientInfo(ClientInfo{Name: "fuzz"}))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		_ = fb.honest.Close()
		_ = srv.Close()
		hs.Close()
	})
	return fb
}

// checkHonest fails t unless the honest client is answered within 2 s.
func (fb *fuzzServer) checkHonest(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := fb.honest.Call(ctx, MethodPing, nil, nil); err != nil {
		t.Fatalf("honest client not answered: %v", err)
	}
}

// fuzzConn is a raw WebSocket client of a fuzz target.
type fuzzConn struct{ *wstest.Conn }

func dialFuzz(t *testing.T, url string) fuzzConn { return fuzzConn{wstest.Dial(t, url)} }

// rpcOut is one JSON-RPC object the server sent.
type rpcOut struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Result  json.RawMessage `json:"result"`
	Error   *Error          `json:"error"`
}

func compactJSON(b []byte) string {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return string(b)
	}
	return buf.String()
}

// expected lists the answers a frame earns, as decodeFrame reads it: the
// id (compacted) and, for errors decided by decoding, the code.
type expected struct {
	id   string
	code int // 0: any answer (the method decides)
}

func expectedAnswers(frame []byte, maxBatch int) (want []expected, batch bool) {
	items, batch, fatal := decodeFrame(frame, maxBatch)
	if fatal != nil {
		return []expected{{id: "null", code: fatal.Error.Code}}, false
	}
	for _, it := range items {
		switch {
		case it.bad != nil:
			want = append(want, expected{id: compactJSON(it.bad.ID), code: it.bad.Error.Code})
		case it.msg != nil && it.msg.kind == kindRequest:
			want = append(want, expected{id: compactJSON(it.msg.ID)})
		}
	}
	return want, batch
}

const fuzzSentinel = `"fuzz-sentinel-5f0c"`

// exchange sends frame, then a ping with the sentinel id, and reads until
// every expected answer and the sentinel's have come. It answers the
// server's own requests (deliveries) as processed. It checks each answer
// and returns them.
func (c fuzzConn) exchange(frame []byte, maxBatch int) []rpcOut {
	c.TB.Helper()
	want, batch := expectedAnswers(frame, maxBatch)
	c.Write(frame)
	c.Write([]byte(`{"jsonrpc":"2.0","id":` + fuzzSentinel + `,"method":"ping"}`))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var got []rpcOut
	sentinel, batchSeen := false, false
	for !sentinel || len(got) < len(want) {
		b := c.Read(ctx)
		var outs []rpcOut
		isArray := len(b) > 0 && b[0] == '['
		if isArray {
			if err := json.Unmarshal(b, &outs); err != nil {
				c.TB.Fatalf("server sent an undecodable batch %s: %v", b, err)
			}
			if !batch || batchSeen || len(outs) != len(want) {
				c.TB.Fatalf("batch answer of %d for %d expected (batch %v, seen %v): %s", len(outs), len(want), batch, batchSeen, b)
			}
			batchSeen = true
		} else {
			var o rpcOut
			if err := json.Unmarshal(b, &o); err != nil {
				c.TB.Fatalf("server sent undecodable %s: %v", b, err)
			}
			outs = []rpcOut{o}
		}
		for _, o := range outs {
			if o.JSONRPC != "2.0" {
				c.TB.Fatalf("not JSON-RPC 2.0: %s", b)
			}
			if o.Method != "" { // the server's own request or notification
				if o.ID != nil && !isArray {
					c.Write([]byte(`{"jsonrpc":"2.0","id":` + string(o.ID) + `,"result":{"processed":true}}`))
				}
				continue
			}
			if (o.Result == nil) == (o.Error == nil) {
				c.TB.Fatalf("answer with both or neither of result and error: %s", b)
			}
			if o.Error != nil && o.Error.Code == CodeInternalError {
				c.TB.Fatalf("internal error (a handler failed or panicked) for %q: %s", frame, b)
			}
			if o.Error != nil && o.Error.Code == CodeInvalidParams && !strings.HasPrefix(o.Error.Message, "invalid params") {
				c.TB.Fatalf("-32602 without a clear message: %s", b)
			}
			if compactJSON(o.ID) == fuzzSentinel && !isArray {
				if sentinel {
					c.TB.Fatalf("sentinel answered twice")
				}
				sentinel = true
				continue
			}
			got = append(got, o)
		}
	}
	if batch && len(want) > 0 && !batchSeen {
		c.TB.Fatalf("batch %q answered element by element", frame)
	}
	// Match answers to what was expected, as multisets of ids.
	left := append([]expected(nil), want...)
	for _, o := range got {
		id, i := compactJSON(o.ID), -1
		for j, w := range left {
			if w.id == id && (w.code == 0 || (o.Error != nil && o.Error.Code == w.code)) {
				i = j
				break
			}
		}
		if i < 0 {
			c.TB.Fatalf("unexpected answer %+v (error %v) for %q; expected %+v", o, o.Error, frame, want)
		}
		left = append(left[:i], left[i+1:]...)
	}
	return got
}

// dispatchSeeds are frames for FuzzDispatch, beside the transcripts (the
// bus's methods are not served here: they are answered -32601).
var dispatchSeeds = []string{
	`{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"topic":"inbound:*","policy":"continueAll"}}`,
	`{"jsonrpc":"2.0","id":2,"method":"sendMessage","params":{"topic":"inbound:1","payload":{"type":"plaintext_message","text":"hi"}}}`,
	`{"jsonrpc":"2.0","id":3,"method":"unsubscribe","params":{"topic":"inbound:*","defaultHandler":"yes"}}`,
	`{"jsonrpc":"2.0","id":4,"method":"bus.history","params":{"topic":5}}`,
	`{"jsonrpc":"2.0","id":5,"method":"bus.deadLetters","params":{"limit":"10"}}`,
	`{"jsonrpc":"2.0","id":6,"method":"bus.replay","params":{"id":7}}`,
	`[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"sendMessage","params":{"topic":"x","payload":{"type":"event"}}},{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}]`,
	`{"jsonrpc":"2.0","id":"a","method":"mesh.call","params":{"agentId":"` + fuzzAgent + `","capability":"echo","timeoutMs":"10"}}`,
	`{"jsonrpc":"2.0","id":null,"method":"subscribe","params":{"topic":"agent:*","defaultHandler":true}}`,
	`{"jsonrpc":"2.0","id":9,"method":"sendMessage","params":{"topic":"agent:` + fuzzAgent + `","payload":{"type":5}}}`,
}

// FuzzDispatch drives fuzzed frames through a live connection after a
// real initialize: every request gets exactly one answer, a
// decoding error is -32700 or -32600 as decodeFrame decides, no input is
// answered -32603, and the honest client is still answered.
func FuzzDispatch(f *testing.F) {
	for _, s := range transcriptFrames(f) {
		f.Add([]byte(s))
	}
	for _, s := range dispatchSeeds {
		f.Add([]byte(s))
	}
	fb := newFuzzServer(f)
	maxBatch := DefaultLimits().MaxBatch
	f.Fuzz(func(t *testing.T, frame []byte) {
		if bytes.Contains(frame, []byte("fuzz-sentinel")) {
			return
		}
		c := dialFuzz(t, fb.url)
		id := fb.n.Add(1)
		got := c.exchange([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"clientId":"fuzz-%d","clientInfo":{"name":"fuzz"}}}`, id)), maxBatch)
		if len(got) != 1 || got[0].Error != nil {
			t.Fatalf("initialize: %+v", got)
		}
		c.exchange(frame, maxBatch)
		fb.checkHonest(t)
	})
}

// localMethods are the methods FuzzLocalAPI calls; the fuzzer picks one.
var localMethods = []string{
	MethodPing, MethodMeshID, MethodMeshPeers, MethodMeshCall, MethodMeshPublish,
	MethodMeshSubscribe, MethodMeshUnsubscribe,
	MethodInitialize, MethodMeshServe, MethodMeshUnserve, MethodMeshOnMessage, MethodMeshSendMessage,
	MethodMeshProgress, MethodMeshSetState,
}

// FuzzLocalAPI calls each method of the local API with fuzzed params
// against the fake mesh (the bus's methods have a fuzz target of their
// own, with the bus): one answer, never -32603, and a -32602 says
// "invalid params: …" (a wrong JSON type is a clear error, not a
// panic or a silent default).
func FuzzLocalAPI(f *testing.F) {
	seeds := map[string][]string{
		MethodMeshCall:        {`{"agentId":"` + fuzzAgent + `","capability":"echo","params":{},"timeoutMs":1000}`, `{"agentId":5}`, `{"agentId":"` + fuzzAgent + `","action":7}`, `{"agentId":"` + fuzzAgent + `","capability":"x","timeoutMs":"10000"}`, `{"agentId":"` + fuzzAgent + `","capability":"echo","receipt":true}`, `{"capability":"echo","receipt":"yes"}`},
		MethodMeshPublish:     {`{"topic":"outbound:1","payload":{"a":1}}`, `{"topic":1,"payload":{}}`, `{"topic":"t","payload":{},"filter":{"includeAgents":"x"}}`, `{"topic":"t","payload":{},"filter":{"persona_types":["qa"],"personaTypes":[]}}`},
		MethodMeshSubscribe:   {`{"pattern":"outbound:*"}`, `{"pattern":{}}`},
		MethodMeshUnsubscribe: {`{"subscription":"s1"}`, `{"subscription":1}`},
		MethodInitialize:      {`{"clientId":"c","clientInfo":{"name":"n","version":"1"}}`, `{"clientId":1}`, `{"clientId":"c","clientInfo":{"name":5}}`},
		MethodMeshServe: {`{"capabilities":[{"name":"summarize","input_schema":{"type":"object"},"idempotent":true}]}`, `{"capabilities":[{"name":"x","handler":"echo"}]}`,
			`{"capabilities":[{"name":1}]}`, `{"capabilities":[{"name":"x","keywords":"k"}]}`, `{"capabilities":"x"}`},
		MethodMeshUnserve:     {`{"capabilities":["summarize"]}`, `{"capabilities":[1]}`},
		MethodMeshSendMessage: {`{"agentId":"` + fuzzAgent + `","message":{"subject":"s","body":"b","priority":"high","requires_response":true,"context":{}}}`, `{"agentId":"` + fuzzAgent + `","message":{"requires_response":"yes"}}`, `{"agentId":1,"message":{}}`},
		MethodMeshProgress:    {`{"taskId":"t1","result":{"step":1}}`, `{"taskId":1}`},
		MethodMeshSetState:    {`{"taskId":"t1","state":"ESCALATED"}`, `{"taskId":"t1","state":"COMPLETED"}`, `{"taskId":"t1","state":5}`},
	}
	for i, m := range localMethods {
		f.Add(uint8(i), []byte(`{}`))
		f.Add(uint8(i), []byte(`[]`))
		f.Add(uint8(i), []byte(`{"unknown":true}`))
		for _, s := range seeds[m] {
			f.Add(uint8(i), []byte(s))
		}
	}
	fb := newFuzzServer(f)
	maxBatch := DefaultLimits().MaxBatch
	f.Fuzz(func(t *testing.T, which uint8, params []byte) {
		if !json.Valid(params) || bytes.Contains(params, []byte("fuzz-sentinel")) {
			return // the decoder's own cases: FuzzDispatch
		}
		method := localMethods[int(which)%len(localMethods)]
		c := dialFuzz(t, fb.url)
		// Mostly as an initialized client; one call in four comes first on
		// its connection, and is answered -32006 unless it is initialize.
		if method != MethodInitialize && fb.n.Add(1)%4 != 0 {
			c.exchange([]byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"clientId":"local-%d","clientInfo":{"name":"fuzz"}}}`, fb.n.Load())), maxBatch)
		}
		frame, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": json.RawMessage(params)})
		if err != nil {
			return
		}
		got := c.exchange(frame, maxBatch)
		if len(got) > 1 {
			t.Fatalf("%d answers to one request: %+v", len(got), got)
		}
		fb.checkHonest(t)
	})
}

// transcriptFrames returns the client frames of the transcripts in
// testdata.
func transcriptFrames(f *testing.F) []string {
	files, _ := filepath.Glob(filepath.Join("testdata", "*.txt"))
	var out []string
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		for line := range strings.SplitSeq(string(src), "\n") {
			if frame, ok := strings.CutPrefix(line, "--> "); ok {
				out = append(out, frame)
			}
		}
	}
	return out
}
