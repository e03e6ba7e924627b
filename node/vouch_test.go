package node_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// slashKey returns the base64 public key of the first meshtest key whose
// standard base64 form contains a '/', the separator of
// "<agent id>/<client>" entries.
func slashKey(t *testing.T) (int, string) {
	t.Helper()
	for i := 1000; i < 1200; i++ {
		raw, err := meshtest.Key(t, i).GetPublic().Raw()
		if err != nil {
			t.Fatal(err)
		}
		if k := base64.StdEncoding.EncodeToString(raw); strings.Contains(k, "/") {
			return i, k
		}
	}
	t.Fatal("no key with a '/' in its base64 form")
	return 0, ""
}

func TestParsePolicyClientEntries(t *testing.T) {
	relay := meshtest.ID(t, 1).String()
	_, slashed := slashKey(t)
	for _, tc := range []struct {
		name, entry, err string
	}{
		{"one client", relay + "/lobby:alice", ""},
		{"client prefix", relay + "/lobby:*", ""},
		{"every client", relay + "/*", ""},
		{"client with a slash", relay + "/bus:team/ci", ""},
		{"base64 agent id with a slash", slashed + "/lobby:alice", ""},
		{"no client", relay + "/", "names no client"},
		{"star inside", relay + "/lo*by", "'*' may only end an entry"},
		{"space in client", relay + "/ali ce", "whitespace"},
		{"not an agent", "bob/alice", "bob/alice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc, _ := json.Marshal(map[string]any{"rules": []map[string]any{{"agents": []string{tc.entry}, "rate_limit": "1/s"}}})
			_, err := node.ParsePolicy(doc)
			switch {
			case tc.err == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Fatalf("error %v, want one containing %q", err, tc.err)
			}
			if tc.err == "" {
				return
			}
			// authorized_requester_ids reads the same entries.
			svc := node.Service{Capability: protocol.Capability{Name: "x", AuthorizedRequesterIDs: []string{tc.entry}}, Handler: node.EchoHandler()}
			n, err := node.New(node.WithIdentity(meshtest.Key(t, 9)), node.WithServices(svc))
			if err == nil {
				_ = n.Close()
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("capability ACL: error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

// vouchCall calls a capability of p from n, vouching for client ("" for
// none).
func vouchCall(t *testing.T, n, p *node.Node, action, client string) error {
	t.Helper()
	_, err := n.Call(meshtest.Context(t, 10*time.Second), protocol.CallRequest{To: p.AgentID(), Action: action, OnBehalfOf: client})
	return err
}

// TestVouchedACL: a provider tells a relay's clients apart. An entry
// "<relay>/lobby:alice" admits only requests the relay signs for
// lobby:alice; a bare relay id admits only the relay asking for itself;
// "<relay>/*" admits any client it vouches for, and nobody else can vouch
// for the relay's clients.
func TestVouchedACL(t *testing.T) {
	relayKey, relayB64 := slashKey(t)
	relay, other := meshtest.Node(t, relayKey), meshtest.Node(t, 31)
	r := relay.AgentID()
	var mu sync.Mutex
	var seen []string
	recording := node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
		mu.Lock()
		seen = append(seen, c.From.String()+"|"+c.OnBehalfOf+"|"+c.Requester())
		mu.Unlock()
		return json.RawMessage(`{}`), nil
	})
	svc := func(name string, acl ...string) node.Service {
		return node.Service{Capability: protocol.Capability{Name: name, AuthorizedRequesterIDs: acl}, Handler: recording}
	}
	p := meshtest.Node(t, 32, node.WithServices(
		svc("alice-only", r+"/lobby:alice"),
		svc("alice-b64", relayB64+"/lobby:alice"),
		svc("relay-only", r),
		svc("any-client", r+"/*"),
		svc("lobby-clients", r+"/lobby:*"),
	))
	meshtest.Connect(t, relay, p)
	meshtest.Connect(t, other, p)

	for _, tc := range []struct {
		from   *node.Node
		action string
		client string
		ok     bool
	}{
		{relay, "alice-only", "lobby:alice", true},
		{relay, "alice-only", "lobby:bob", false},
		{relay, "alice-only", "", false}, // the relay is not its client
		{relay, "alice-only", "bus:alice", false},
		{other, "alice-only", "lobby:alice", false}, // only the relay vouches for its clients
		{relay, "alice-b64", "lobby:alice", true},
		{relay, "relay-only", "", true},
		{relay, "relay-only", "lobby:alice", false}, // a bare id does not admit the relay's clients
		{relay, "any-client", "lobby:bob", true},
		{relay, "any-client", "bus:ci", true},
		{relay, "any-client", "", false},
		{other, "any-client", "lobby:bob", false},
		{relay, "lobby-clients", "lobby:carol", true},
		{relay, "lobby-clients", "bus:carol", false},
	} {
		from := "relay"
		if tc.from == other {
			from = "other"
		}
		err := vouchCall(t, tc.from, p, tc.action, tc.client)
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s for %q calling %s: %v", from, tc.client, tc.action, err)
		case !tc.ok && protocol.CodeOf(err) != protocol.CodeUnauthorized:
			t.Errorf("%s for %q calling %s: got %v, want UNAUTHORIZED", from, tc.client, tc.action, err)
		case !tc.ok && tc.client != "" && !strings.Contains(err.Error(), "/"+tc.client):
			t.Errorf("the refusal does not name the vouched client: %v", err)
		}
	}
	// A call to itself that a node makes for a client is held to the same
	// ACL.
	sn := meshtest.Node(t, 33, node.WithServices(svc("alice-only", meshtest.ID(t, 33).String()+"/lobby:alice")))
	if err := vouchCall(t, sn, sn, "alice-only", "lobby:alice"); err != nil {
		t.Errorf("self for alice: %v", err)
	}
	wantCode(t, vouchCall(t, sn, sn, "alice-only", "lobby:bob"), protocol.CodeUnauthorized)
	wantCode(t, vouchCall(t, sn, sn, "alice-only", ""), protocol.CodeUnauthorized)

	mu.Lock()
	defer mu.Unlock()
	if want := r + "|lobby:alice|" + r + "/lobby:alice"; len(seen) == 0 || seen[0] != want {
		t.Errorf("the handler saw %q first, want %q", seen, want)
	}
}

// TestVouchedPolicy: a policy rule naming "<relay>/lobby:*" limits each
// vouched client with a bucket of its own, and decides what it may call.
func TestVouchedPolicy(t *testing.T) {
	relay := meshtest.Node(t, 41)
	r := relay.AgentID()
	pol, err := node.ParsePolicy([]byte(`{"rules": [
		{"name": "quiet bob", "agents": ["` + r + `/lobby:bob"], "allowed_capabilities": ["other"]},
		{"name": "lobby clients", "agents": ["` + r + `/lobby:*"], "rate_limit": "2/minute"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	p := meshtest.Node(t, 42, node.WithServices(echoService("echo"), echoService("other")), node.WithPolicy(pol))
	meshtest.Connect(t, relay, p)

	for i := range 2 {
		if err := vouchCall(t, relay, p, "echo", "lobby:alice"); err != nil {
			t.Fatalf("alice's call %d: %v", i+1, err)
		}
	}
	pe := wantCode(t, vouchCall(t, relay, p, "echo", "lobby:alice"), protocol.CodeRateLimited)
	if !strings.Contains(pe.Message, "policy lobby clients exceeded by "+r+"/lobby:alice") {
		t.Errorf("message %q", pe.Message)
	}
	// Carol has a bucket of her own; the relay itself is not limited.
	for i := range 2 {
		if err := vouchCall(t, relay, p, "echo", "lobby:carol"); err != nil {
			t.Fatalf("carol's call %d: %v", i+1, err)
		}
	}
	for i := range 4 {
		if err := vouchCall(t, relay, p, "echo", ""); err != nil {
			t.Fatalf("the relay's own call %d: %v", i+1, err)
		}
	}
	// The first rule naming bob decides what bob may call.
	wantCode(t, vouchCall(t, relay, p, "echo", "lobby:bob"), protocol.CodeUnauthorized)
	if err := vouchCall(t, relay, p, "other", "lobby:bob"); err != nil {
		t.Fatalf("bob's call to other: %v", err)
	}
}

// TestOnBehalfOfStrict: a signed request whose metadata.onBehalfOf is not
// a valid client name is answered INVALID_MESSAGE and never handled.
func TestOnBehalfOfStrict(t *testing.T) {
	handled := make(chan struct{}, 16)
	counting := node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
		handled <- struct{}{}
		return c.Request.Params, nil
	})
	p := meshtest.Node(t, 52, node.WithServices(node.Service{Capability: protocol.Capability{Name: "echo"}, Handler: counting}))
	a := meshtest.Node(t, 51)
	meshtest.Connect(t, a, p)
	self := signer(t, 51)
	for _, md := range []string{
		`{"onBehalfOf":5}`,
		`{"onBehalfOf":null}`,
		`{"onBehalfOf":["lobby:alice"]}`,
		`{"onBehalfOf":{"id":"lobby:alice"}}`,
		`{"onBehalfOf":true}`,
		`{"onBehalfOf":""}`,
		`{"onBehalfOf":"lobby:al ice"}`,
		`{"onBehalfOf":"lobby:*"}`,
		`{"onBehalfOf":"` + strings.Repeat("x", protocol.MaxOnBehalfOfLen+1) + `"}`,
	} {
		t.Run(md[:min(len(md), 40)], func(t *testing.T) {
			s := rawStream(t, a, p)
			frame := requestFrame(t, self, p.ID(), craft{envelope: func(e *protocol.Envelope) { e.Metadata = json.RawMessage(md) }})
			if _, err := s.Write(frame); err != nil {
				t.Fatal(err)
			}
			_, err := readAnswer(t, s, p.ID())
			pe := wantCode(t, err, protocol.CodeInvalidMessage)
			if !strings.Contains(pe.Message, "onBehalfOf") {
				t.Errorf("message %q does not name onBehalfOf", pe.Message)
			}
		})
	}
	// Other metadata is left alone, and a valid client passes.
	for _, md := range []string{`{"trace":"x"}`, `{"onBehalfOf":"lobby:alice"}`} {
		s := rawStream(t, a, p)
		if _, err := s.Write(requestFrame(t, self, p.ID(), craft{envelope: func(e *protocol.Envelope) { e.Metadata = json.RawMessage(md) }})); err != nil {
			t.Fatal(err)
		}
		if resp, err := readAnswer(t, s, p.ID()); err != nil || resp.Status != protocol.StatusSuccess {
			t.Fatalf("metadata %s: %v %v", md, resp, err)
		}
	}
	if len(handled) != 2 {
		t.Fatalf("handler ran %d times, want 2", len(handled))
	}
	// The caller's side refuses a bad client name before sending.
	err := vouchCall(t, a, p, "echo", "lobby:*")
	wantCode(t, err, protocol.CodeInvalidMessage)
}
