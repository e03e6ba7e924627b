package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	libp2ppubsub "github.com/libp2p/go-libp2p-pubsub"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// fuzzEnvelope builds an envelope of type typ from a fuzzed payload and
// metadata, signed by s and addressed to to (a topic when topic is set).
// ok is false when the fuzzed bytes cannot make a signable envelope (not
// JSON, or not an object), which the signer itself refuses.
func fuzzEnvelope(s *sign.Signer, typ protocol.MessageType, to *protocol.Recipient, payload, metadata []byte) (body, sig []byte, ok bool) {
	p, err := sign.Canonicalize(payload)
	if err != nil {
		return nil, nil, false
	}
	e, err := protocol.NewEnvelope(typ, to, json.RawMessage(p))
	if err != nil {
		return nil, nil, false
	}
	if len(metadata) > 0 {
		md, err := sign.Canonicalize(metadata)
		if err != nil {
			return nil, nil, false
		}
		e.Metadata = md
	}
	body, sig, err = protocol.Seal(s, e)
	if err != nil {
		return nil, nil, false
	}
	return body, sig, true
}

// fuzzProvider is a provider with an echo capability (and one with an
// input schema), no rate limit, connected to a requester with key 1.
func fuzzProvider(f *testing.F) (a, p *node.Node) {
	lim := node.DefaultLimits()
	lim.RequestsPerSecond = 0
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	p = meshtest.Node(f, 2, node.WithLimits(lim), node.WithServices(
		echoService("echo"),
		node.Service{Capability: protocol.Capability{Name: "typed", InputSchema: schema}, Handler: node.HandlerFunc(
			func(_ context.Context, c *node.Call) (json.RawMessage, error) { return c.Request.Params, nil })},
	))
	a = meshtest.Node(f, 1)
	meshtest.Connect(f, a, p)
	return a, p
}

// FuzzServeRequest drives the provider's whole request path with frames
// signed by the requester's key, so that they get past the signature
// check: whatever the payload and metadata, the requester gets exactly one
// final answer (a success response or an error with a known code), the
// provider does not panic, and it still serves an honest call afterwards.
func FuzzServeRequest(f *testing.F) {
	for _, s := range []string{
		`{"action":"echo","correlationId":"c","params":{"x":1}}`,
		`{"action":"typed","correlationId":"c","params":{"n":1},"timeout":1000}`,
		`{"action":"typed","correlationId":"c","params":{"n":"1"}}`,
		`{"action":5,"correlationId":"c","params":{}}`,
		`{"action":"echo","correlationId":7,"params":{}}`,
		`{"action":"echo","correlationId":"c","params":{},"timeout":"10000"}`,
		`{"action":"echo","correlationId":"c","params":{},"timeout":9223372036854775807}`,
		`{"action":"echo","correlationId":"c","params":[1]}`,
		`{"action":"nope","correlationId":"c"}`,
		`{"action":"agent.message","correlationId":"c","params":{"body":"b","message_id":5}}`,
		`{"action":"agent.message","correlationId":"c","params":{"body":"b","message_id":"m","requires_response":"yes"}}`,
		`{"action":"task.status","correlationId":"c","params":{"task_id":5}}`,
		`{"action":"task.cancel","correlationId":"c","params":{"task_id":"c"}}`,
		`{}`,
	} {
		f.Add([]byte(s), []byte(nil))
	}
	f.Add([]byte(`{"action":"echo","correlationId":"c","params":{}}`), []byte(`{"filter":5}`))
	f.Add([]byte(`{"action":"echo","correlationId":"c","params":{}}`), []byte(`{"onBehalfOf":"lobby:alice"}`))
	f.Add([]byte(`{"action":"echo","correlationId":"c","params":{}}`), []byte(`{"onBehalfOf":5}`))
	a, p := fuzzProvider(f)
	self := signer(f, 1)
	f.Fuzz(func(t *testing.T, payload, metadata []byte) {
		body, sig, ok := fuzzEnvelope(self, protocol.TypeRequest, &protocol.Recipient{AgentID: p.AgentID()}, payload, metadata)
		if !ok {
			t.Skip("not a signable envelope")
		}
		s := rawStream(t, a, p)
		if _, err := s.Write(protocol.AppendSignedFrame(nil, sig, body)); err != nil {
			t.Fatal(err)
		}
		_ = s.CloseWrite()
		finals := 0
		fr := protocol.NewFrameReader(s, 0)
		for {
			frame, err := fr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("reading answers: %v", err)
			}
			fsig, fbody, err := protocol.SplitSigned(frame)
			if err != nil {
				t.Fatal(err)
			}
			e, err := protocol.Open(fbody, fsig, p.ID())
			if err != nil {
				t.Fatalf("answer does not verify: %v", err)
			}
			resp, err := protocol.DecodeResponse(e)
			var pe *protocol.Error
			switch {
			case errors.As(err, &pe):
				if !pe.Code.Valid() || pe.Message == "" {
					t.Fatalf("error answer without a valid code and message: %+v", pe)
				}
				finals++
			case err != nil:
				t.Fatalf("answer does not decode: %v", err)
			case resp.Status.Final():
				finals++
			}
		}
		if finals != 1 {
			t.Fatalf("%d final answers, want exactly 1", finals)
		}
		resp, err := call(t, a, p, "echo", `{"ok":true}`)
		if err != nil || string(resp.Result) != `{"ok":true}` {
			t.Fatalf("honest call after the fuzzed frame: %v %v", resp, err)
		}
	})
}

// FuzzHello drives a node's hello responder with hellos signed by the
// remote's key and a fuzzed payload: the node does not panic, never
// answers a malformed hello (it resets the stream), answers a well-formed
// one with its own unless the remote is over its hello budget, and still
// serves an honest call.
func FuzzHello(f *testing.F) {
	for _, s := range []string{
		`{"version":"0.1"}`,
		`{"capabilities":[{"name":"x","input_schema":{"type":"object"}}],"features":["a"],"seq":1,"version":"0.1"}`,
		`{"capabilities":5,"version":"0.1"}`,
		`{"capabilities":[{"name":5}],"version":"0.1"}`,
		`{"capabilities":[null,{"name":"y","input_schema":"no"}],"version":"0.1"}`,
		`{"features":"a","seq":"1","version":1}`,
		`{"seq":1.5}`,
	} {
		f.Add([]byte(s))
	}
	a, p := fuzzProvider(f)
	self := signer(f, 1)
	f.Fuzz(func(t *testing.T, payload []byte) {
		body, sig, ok := fuzzEnvelope(self, protocol.TypeHello, &protocol.Recipient{AgentID: p.AgentID()}, payload, nil)
		if !ok {
			t.Skip("not a signable envelope")
		}
		s, err := a.Host().NewStream(meshtest.Context(t, 10*time.Second), p.ID(), protocol.HelloProtocol)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Reset()
		_ = s.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := s.Write(protocol.AppendSignedFrame(nil, sig, body)); err != nil {
			t.Fatal(err)
		}
		var h protocol.Hello
		wellFormed := protocol.DecodePayload(payload, "hello", &h) == nil
		frame, err := protocol.NewFrameReader(s, 0).Next()
		switch {
		case err == nil && !wellFormed:
			t.Fatal("a malformed hello was answered")
		case err == nil:
			fsig, fbody, err := protocol.SplitSigned(frame)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := protocol.Open(fbody, fsig, p.ID()); err != nil {
				t.Fatalf("hello answer does not verify: %v", err)
			}
		}
		_, _ = p.PeerCapabilities(a.ID())
		_ = p.Peers()
		resp, err := call(t, a, p, "echo", `{"ok":true}`)
		if err != nil || string(resp.Result) != `{"ok":true}` {
			t.Fatalf("honest call after the fuzzed hello: %v %v", resp, err)
		}
	})
}

// FuzzTopicNotify publishes notify envelopes signed by a real agent key,
// with fuzzed payload, metadata (broadcast filter) and topic, from a raw
// GossipSub router into a node's topic validator and delivery path
// (subscribers, filters, presence heartbeats). After each, an honest
// marker published the same way must be delivered: the node did not
// panic and its topics still work.
func FuzzTopicNotify(f *testing.F) {
	for _, s := range []struct{ topic, payload, metadata string }{
		{"chat:x", `{"text":"hi"}`, ``},
		{"chat:x", `{"text":"hi"}`, `{"filter":5}`},
		{"chat:x", `{"text":"hi"}`, `{"filter":{"include_agents":"a"}}`},
		{"chat:x", `{"text":"hi"}`, `{"filter":{"include_agents":["a"],"persona_types":[1]}}`},
		{"presence:", `{"agent_id":5,"status":"available"}`, ``},
		{"presence:", `{"interval_ms":"1","status":"busy"}`, ``},
		{"presence:", `{"interval_ms":-1,"status":"available","capability_digest":7}`, ``},
	} {
		f.Add(s.topic, []byte(s.payload), []byte(s.metadata))
	}
	self := signer(f, 1)
	victim := meshtest.Node(f, 2)
	var mu sync.Mutex
	got := map[string]bool{}
	for _, pattern := range []string{"chat:*", "presence:*"} {
		cancel, err := victim.Subscribe(pattern, func(m protocol.TopicMessage) {
			var v struct {
				Marker string `json:"marker"`
			}
			if json.Unmarshal(m.Payload, &v) == nil && v.Marker != "" {
				mu.Lock()
				got[v.Marker] = true
				mu.Unlock()
			}
		})
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(cancel)
	}
	topics := map[string]*libp2ppubsub.Topic{"chat": rogue(f, victim, "chat"), "presence": rogue(f, victim, "presence")}
	f.Fuzz(func(t *testing.T, topic string, payload, metadata []byte) {
		fam, to := "chat", "chat:"+topic
		if len(topic) >= len("presence:") && topic[:len("presence:")] == "presence:" {
			fam, to = "presence", protocol.PresenceTopic(self.ID().String())
		}
		body, sig, ok := fuzzEnvelope(self, protocol.TypeNotify, &protocol.Recipient{Broadcast: true, Topic: to}, payload, metadata)
		if ok {
			if err := topics[fam].Publish(context.Background(), append(append([]byte{}, sig...), body...)); err != nil {
				t.Fatal(err)
			}
		}
		// The marker goes on the chat family; a fuzzed presence message
		// travels on another GossipSub topic, so it may be handled after
		// the marker, but a panic it causes still ends the run.
		marker := protocol.NewID()
		mb, ms, ok := fuzzEnvelope(self, protocol.TypeNotify, &protocol.Recipient{Broadcast: true, Topic: "chat:marker"},
			[]byte(`{"marker":"`+marker+`"}`), nil)
		if !ok {
			t.Fatal("marker does not seal")
		}
		if err := topics["chat"].Publish(context.Background(), append(append([]byte{}, ms...), mb...)); err != nil {
			t.Fatal(err)
		}
		wait.For(t, 30*time.Second, func() error {
			mu.Lock()
			defer mu.Unlock()
			if !got[marker] {
				return errors.New("the honest marker has not arrived")
			}
			return nil
		})
	})
}
