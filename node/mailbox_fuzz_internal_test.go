package node

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/meshagent/meshagent/mailbox"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// FuzzTakeFromMailbox drives the path of a request fetched from a
// mailbox (takeFromMailbox: verification, the policy's limits, then run
// with its ACL, policy and schemas) with envelopes signed by a sender
// that is nothing to the node (a throwaway identity) and a fuzzed payload
// and metadata: nothing panics, the fetch's decision comes within the
// handler timeout, a request the checks refuse never reaches a handler,
// the same item taken twice runs at most once, and an honest request
// taken afterwards still runs.
func FuzzTakeFromMailbox(f *testing.F) {
	for _, s := range []string{
		`{"action":"echo","correlationId":"c","params":{"x":1}}`,
		`{"action":"typed","correlationId":"c","params":{"n":1}}`,
		`{"action":"typed","correlationId":"c","params":{"n":"1"}}`,
		`{"action":5,"correlationId":"c","params":{}}`,
		`{"action":"echo","correlationId":7}`,
		`{"action":"echo","correlationId":"c","params":{},"timeout":"10000"}`,
		`{"action":"echo","correlationId":"c","params":[1]}`,
		`{"action":"nope","correlationId":"c"}`,
		`{"action":"agent.message","correlationId":"c","params":{"body":"b","message_id":5}}`,
		`{"action":"agent.message","correlationId":"c","params":{"body":"b","message_id":"m","requires_response":"yes"}}`,
		`{"action":"agent.message","correlationId":"c","params":{"subject":"s","body":"b","message_id":"m"}}`,
		`{"action":"task.status","correlationId":"c","params":{"task_id":5}}`,
		`{"action":"task.cancel","correlationId":"c","params":{"task_id":"c"}}`,
		`{}`,
	} {
		f.Add([]byte(s), []byte(nil))
	}
	f.Add([]byte(`{"action":"echo","correlationId":"c","params":{}}`), []byte(`{"onBehalfOf":"lobby:alice"}`))
	f.Add([]byte(`{"action":"echo","correlationId":"c","params":{}}`), []byte(`{"filter":5}`))

	var typedRuns, echoRuns, messages atomic.Int64
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	lim := DefaultLimits()
	lim.RequestsPerSecond = 0
	lim.HandlerTimeout = 5 * time.Second
	n, err := New(
		WithIdentity(fuzzKey(f)),
		WithListenAddrs(ma.StringCast("/ip4/127.0.0.1/tcp/0")),
		WithMDNS(false), WithDHT(false),
		WithLogger(slog.New(slog.DiscardHandler)),
		WithLimits(lim),
		WithServices(
			Service{Capability: protocol.Capability{Name: "echo"}, Handler: HandlerFunc(func(_ context.Context, c *Call) (json.RawMessage, error) {
				echoRuns.Add(1)
				return c.Request.Params, nil
			})},
			Service{Capability: protocol.Capability{Name: "typed", InputSchema: schema}, Handler: HandlerFunc(func(_ context.Context, c *Call) (json.RawMessage, error) {
				typedRuns.Add(1)
				var p struct{ N int }
				if err := json.Unmarshal(c.Request.Params, &p); err != nil {
					return nil, errors.New("typed: params past the schema do not decode")
				}
				return c.Request.Params, nil
			})},
		),
		WithMessageHandler(func(context.Context, peer.ID, protocol.AgentMessage) (json.RawMessage, error) {
			messages.Add(1)
			return nil, nil
		}),
	)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = n.Close() })
	sender, err := sign.NewSigner(fuzzKey(f))
	if err != nil {
		f.Fatal(err)
	}
	relay := peer.ID("relay")
	var seq atomic.Int64
	f.Fuzz(func(t *testing.T, payload, metadata []byte) {
		p, err := sign.Canonicalize(payload)
		if err != nil {
			t.Skip("not a signable payload")
		}
		e, err := protocol.NewEnvelope(protocol.TypeRequest, &protocol.Recipient{AgentID: n.AgentID()}, json.RawMessage(p))
		if err != nil {
			t.Skip("not a signable payload")
		}
		if len(metadata) > 0 {
			md, err := sign.Canonicalize(metadata)
			if err != nil {
				t.Skip("not signable metadata")
			}
			e.Metadata = md
		}
		body, sig, err := protocol.Seal(sender, e)
		if err != nil {
			t.Skip("not a signable envelope")
		}
		doc, err := protocol.SignedJSON(body, sig)
		if err != nil {
			t.Skip("not a signable envelope")
		}
		it := mailbox.Item{ID: n.AgentID() + "/" + sender.IDString() + "/" + e.ID, Envelope: doc}
		typed := typedRuns.Load()
		took := make(chan bool, 1)
		start := time.Now()
		go func() { took <- n.takeFromMailbox(relay, it) }()
		select {
		case <-took:
		case <-time.After(2 * lim.HandlerTimeout):
			t.Fatalf("no decision on a fetched request after %v", time.Since(start))
		}
		if got := typedRuns.Load() - typed; got > 0 {
			var req struct {
				Params struct {
					N json.RawMessage `json:"n"`
				} `json:"params"`
			}
			_ = json.Unmarshal(p, &req)
			var num int
			if json.Unmarshal(req.Params.N, &num) != nil {
				t.Fatalf("a request its input schema refuses reached the handler: %s", p)
			}
		}
		// The same item fetched again (an ack lost) runs no handler.
		runs := echoRuns.Load() + typedRuns.Load() + messages.Load()
		n.takeFromMailbox(relay, it)
		if again := echoRuns.Load() + typedRuns.Load() + messages.Load() - runs; again != 0 {
			t.Fatalf("the same fetched item ran %d more handlers: %s", again, p)
		}
		// An honest request still runs.
		id := seq.Add(1)
		honest, err := protocol.NewEnvelope(protocol.TypeRequest, &protocol.Recipient{AgentID: n.AgentID()},
			protocol.Request{Action: "echo", CorrelationID: fmt.Sprint("honest-", id), Params: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		hb, hs, err := protocol.Seal(sender, honest)
		if err != nil {
			t.Fatal(err)
		}
		hdoc, err := protocol.SignedJSON(hb, hs)
		if err != nil {
			t.Fatal(err)
		}
		echo := echoRuns.Load()
		if !n.takeFromMailbox(relay, mailbox.Item{ID: "honest", Envelope: hdoc}) || echoRuns.Load() != echo+1 {
			t.Fatalf("an honest request fetched after %s did not run", p)
		}
	})
}

// fuzzKey is a fresh Ed25519 identity.
func fuzzKey(tb testing.TB) crypto.PrivKey {
	tb.Helper()
	k, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	return k
}
