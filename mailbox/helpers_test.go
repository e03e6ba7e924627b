package mailbox_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/p2ptest"
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/mailbox"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
	"github.com/meshagent/meshagent/store"
)

func TestMain(m *testing.M) { p2ptest.VerifyTestMain(m) }

// relay starts a host with a mailbox server and its store.
func relay(t *testing.T, opts ...mailbox.Option) (host.Host, *mailbox.Server, *store.Store) {
	t.Helper()
	h := p2ptest.Host(t)
	st, err := store.Open(filepath.Join(t.TempDir(), "relay.db"), store.WithPruneInterval(0), store.WithLogger(testlog.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := mailbox.NewServer(h, st, append([]mailbox.Option{mailbox.WithLogger(testlog.New(t))}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = srv.Close()
		_ = st.Close()
	})
	return h, srv, st
}

// agent starts a host that knows the relay's addresses and a client on it,
// and fetches once, which names the relay its mailbox.
func agent(t *testing.T, r host.Host) (host.Host, *mailbox.Client) {
	t.Helper()
	h, c := stranger(t, r)
	if _, err := c.Fetch(ctx(t), r.ID(), "", 0); err != nil {
		t.Fatalf("first fetch: %v", err)
	}
	return h, c
}

// stranger is agent without the fetch: the relay holds nothing for it.
func stranger(t *testing.T, r host.Host) (host.Host, *mailbox.Client) {
	t.Helper()
	h := p2ptest.Host(t)
	h.Peerstore().AddAddrs(r.ID(), r.Addrs(), time.Hour)
	return h, &mailbox.Client{Host: h}
}

// message is a signed agent.message request from h's agent to to, in its
// embedded JSON form.
func message(t testing.TB, h host.Host, to peer.ID, messageID string) json.RawMessage {
	t.Helper()
	return messageAt(t, h, to, messageID, time.Now())
}

func messageAt(t testing.TB, h host.Host, to peer.ID, messageID string, at time.Time) json.RawMessage {
	t.Helper()
	params, _ := json.Marshal(protocol.AgentMessage{MessageID: messageID, Subject: "hi", Body: "while you were away", Priority: protocol.PriorityNormal})
	return sealed(t, h, to, protocol.TypeRequest, &protocol.Request{Action: protocol.MessageCapability, CorrelationID: messageID, Params: params}, at)
}

// call is a signed request of action from h's agent to to, as an outbox
// forwards a call (a bus message to agent:<id>), in its embedded JSON form.
func call(t testing.TB, h host.Host, to peer.ID, action, id string, params json.RawMessage) json.RawMessage {
	t.Helper()
	return sealed(t, h, to, protocol.TypeRequest, &protocol.Request{Action: action, CorrelationID: id, Params: params}, time.Now())
}

// sealed is an envelope of typ with payload, from h's agent to to, dated
// at, in its embedded JSON form.
func sealed(t testing.TB, h host.Host, to peer.ID, typ protocol.MessageType, payload any, at time.Time) json.RawMessage {
	t.Helper()
	s, err := sign.NewSigner(h.Peerstore().PrivKey(h.ID()))
	if err != nil {
		t.Fatal(err)
	}
	e, err := protocol.NewEnvelope(typ, &protocol.Recipient{AgentID: to.String()}, payload)
	if err != nil {
		t.Fatal(err)
	}
	e.Timestamp = protocol.FormatTime(at)
	body, sig, err := protocol.Seal(s, e)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := protocol.SignedJSON(body, sig)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}
