package bus

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// The bus's fuzz target and the helpers the whole-path fuzz targets here
// share (package rpc fuzzes the JSON-RPC decoding and the mesh.*
// methods; this one the bus's methods behind it).

// fuzzAgent is the fake mesh's own agent id (a fixed Ed25519 key).
const fuzzAgent = fakemesh.SelfID

// fakemesh.Instant offers publishing, so that every bus
// method reaches its params decoding.
var (
	_ rpc.Publisher = fakemesh.Instant{}
)

// newFuzzBus serves the bus, with a store, and returns its URL.
func newFuzzBus(f testing.TB) string {
	f.Helper()
	st, err := store.Open(filepath.Join(f.TempDir(), "fuzz.db"))
	if err != nil {
		f.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	srv, err := rpc.New(fakemesh.Instant{}, rpc.WithLogger(log))
	if err != nil {
		f.Fatal(err)
	}
	b, err := New(srv, fakemesh.Instant{}, WithTopics(fakemesh.Instant{}), WithStore(st), WithLogger(log), WithDeliveryTimeout(500*time.Millisecond),
		WithRetryBackoff(50*time.Millisecond, 100*time.Millisecond), WithMeshWait(0))
	if err != nil {
		f.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	f.Cleanup(func() {
		_ = srv.Close()
		_ = b.Close()
		hs.Close()
		_ = st.Close()
	})
	return "ws" + strings.TrimPrefix(hs.URL, "http") + "/"
}

// busMethods are the methods FuzzBusParams calls; the fuzzer picks one.
var busMethods = []string{MethodSubscribe, MethodUnsubscribe, MethodSendMessage, MethodBusHistory, MethodBusDeadLetters, MethodBusReplay}

// FuzzBusParams calls each method of the bus with fuzzed params, as an
// initialized client subscribed to inbound:*: one answer, never -32603,
// and a -32602 says "invalid params: …".
func FuzzBusParams(f *testing.F) {
	seeds := map[string][]string{
		MethodSubscribe:   {`{"topic":"inbound:*","policy":"continueAll","defaultHandler":false}`, `{"topic":"x","policy":3}`, `{"topic":"x","defaultHandler":"no"}`, `{"topic":"inbound:*","group":"g"}`, `{"topic":"x","group":""}`},
		MethodUnsubscribe: {`{"topic":"x","defaultHandler":"no"}`, `{"topic":"inbound:*","group":"g"}`, `{"topic":"x","group":7}`},
		MethodSendMessage: {`{"topic":"inbound:1","payload":{"text":"t"}}`, `{"topic":"inbound:1","payload":"t"}`, `{"topic":"agent:` + fuzzAgent + `","payload":{"type":5}}`,
			// Seed 004's objects as written (no topic).
			`{"type":"agent_message","from_agent_id":"fuzzer","to_agent_id":"` + fuzzAgent + `","subject":"s","body":"b","priority":"high"}`,
			`{"type":"broadcast","from\u005fagent_id":"someone","body":"b","filter":{"persona_types":["qa"]}}`,
			`{"type":"notification","broadcast":true,"notification_type":"bead_completed","payload":{"bead_id":"b"}}`},
		MethodBusHistory:     {`{"topic":"inbound:*","limit":5}`, `{"limit":"5"}`, `{"since":"yesterday"}`},
		MethodBusDeadLetters: {`{"limit":5}`, `{"topic":[]}`},
		MethodBusReplay:      {`{"id":"x"}`, `{"id":5}`},
	}
	for i, m := range busMethods {
		f.Add(uint8(i), []byte(`{}`))
		f.Add(uint8(i), []byte(`[]`))
		f.Add(uint8(i), []byte(`{"unknown":true}`))
		for _, s := range seeds[m] {
			f.Add(uint8(i), []byte(s))
		}
	}
	url := newFuzzBus(f)
	f.Fuzz(func(t *testing.T, which uint8, params []byte) {
		if !json.Valid(params) || !utf8.Valid(params) {
			// The decoder's own cases (rpc's FuzzDispatch): a frame that
			// is not UTF-8 is answered -32700 with id null, which no
			// call of a client can be matched to.
			return
		}
		method := busMethods[int(which)%len(busMethods)]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := rpc.Dial(ctx, url, rpc.WithRequestHandler(func(context.Context, string, json.RawMessage) (any, error) {
			return ProcessResult{Processed: true}, nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := c.Call(ctx, MethodSubscribe, map[string]string{"topic": "inbound:*"}, nil); err != nil {
			t.Fatal(err)
		}
		err = c.Call(ctx, method, json.RawMessage(params), nil)
		var re *rpc.Error
		switch {
		case err == nil:
		case !errors.As(err, &re):
			if !strings.Contains(err.Error(), "params must encode") {
				t.Fatalf("%s %s: %v", method, params, err)
			}
		case re.Code == rpc.CodeInternalError:
			t.Fatalf("%s %s: internal error %v", method, params, re)
		case re.Code == rpc.CodeInvalidParams && !strings.HasPrefix(re.Message, "invalid params"):
			t.Fatalf("%s %s: -32602 without saying so: %v", method, params, re)
		}
		if err := c.Call(ctx, rpc.MethodPing, nil, nil); err != nil {
			t.Fatalf("%s %s: the connection is not answered after it: %v", method, params, err)
		}
	})
}

// Every bus method decodes its params strictly: a member of the wrong
// JSON type, or one whose name differs only in case, is -32602 with a
// message naming the member, never a silent default.
func TestBusParamsWrongTypes(t *testing.T) {
	url := newFuzzBus(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := rpc.Dial(ctx, url, rpc.WithClientID("typed"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, tc := range []struct{ method, params, want string }{
		{MethodBusHistory, `{"limit":"5"}`, `"limit" must be a whole number`},
		{MethodBusHistory, `{"topic":5}`, `"topic" must be a string`},
		{MethodBusHistory, `{"since":"yesterday"}`, `yesterday`},
		{MethodBusHistory, `{"Topic":"x"}`, `unknown field "Topic"`},
		{MethodBusDeadLetters, `{"topic":[]}`, `"topic" must be a string`},
		{MethodBusReplay, `{"id":5}`, `"id" must be a string`},
		{MethodSubscribe, `{"topic":"x","policy":3}`, `policy`},
		{MethodSubscribe, `{"topic":"x","defaultHandler":"no"}`, `"defaultHandler" must be a boolean`},
		{MethodUnsubscribe, `{"topic":"x","defaultHandler":"no"}`, `"defaultHandler" must be a boolean`},
		{MethodSubscribe, `{"topic":"x","group":["g"]}`, `"group" must be a non-empty string`},
		{MethodUnsubscribe, `{"topic":"x","group":""}`, `"group" must be a non-empty string`},
		{MethodSendMessage, `{"topic":"inbound:1","payload":"t"}`, `"payload"`},
		// protocol.DecodeStrict: a member given twice is refused, and an
		// explicit empty policy is not the default.
		{MethodSubscribe, `{"topic":"x","topic":"y"}`, `duplicate member "topic"`},
		{MethodSubscribe, `{"topic":"x","policy":""}`, `policy must be`},
		{MethodSendMessage, `{"topic":"inbound:1","payload":{},"payload":{}}`, `duplicate member "payload"`},
		{MethodBusReplay, `{"id":"a","id":"b"}`, `duplicate member "id"`},
	} {
		var re *rpc.Error
		err := c.Call(ctx, tc.method, json.RawMessage(tc.params), nil)
		if !errors.As(err, &re) || re.Code != rpc.CodeInvalidParams || !strings.Contains(re.Message, tc.want) {
			t.Errorf("%s %s: %v, want -32602 with %q", tc.method, tc.params, err, tc.want)
		}
	}
}
