package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

func auditStore(t testing.TB) *store.Store {
	t.Helper()
	st, err := store.Open(filepath.Join(t.TempDir(), "store.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestAuditLog: both ends record each call and direct message, with
// requester, provider, capability, size, outcome and duration; params
// only with bodies on.
func TestAuditLog(t *testing.T) {
	sender := meshtest.Node(t, 130, node.WithStore(auditStore(t)), node.WithAudit(false))
	provider := meshtest.Node(t, 131, node.WithStore(auditStore(t)), node.WithAudit(true), node.WithServices(echoService("echo")))
	meshtest.Connect(t, sender, provider)
	provider.OnMessage(func(context.Context, peer.ID, protocol.AgentMessage) (json.RawMessage, error) { return nil, nil })
	ctx := meshtest.Context(t, 30*time.Second)

	const calls = 5
	for i := range calls {
		if _, err := call(t, sender, provider, "echo", fmt.Sprintf(`{"n":%d}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := call(t, sender, provider, "missing", `{}`); protocol.CodeOf(err) != protocol.CodeCapabilityNotSupported {
		t.Fatalf("missing capability: %v", err)
	}
	if _, err := sender.SendMessage(ctx, provider.AgentID(), protocol.AgentMessage{Subject: "hello"}, 0); err != nil {
		t.Fatal(err)
	}
	count := func(es []protocol.AuditEntry, capability, outcome string) int {
		c := 0
		for _, e := range es {
			if e.Capability == capability && e.Outcome == outcome {
				c++
			}
		}
		return c
	}
	for _, side := range []struct {
		name      string
		n         *node.Node
		direction string
		bodies    bool
	}{{"sender", sender, protocol.CallSent, false}, {"provider", provider, protocol.CallServed, true}} {
		t.Run(side.name, func(t *testing.T) {
			var es []protocol.AuditEntry
			wait.For(t, 10*time.Second, func() error {
				var err error
				es, err = side.n.Audit(ctx, protocol.AuditQuery{Agent: provider.AgentID()})
				if err == nil && (count(es, "echo", "success") != calls || count(es, "missing", string(protocol.CodeCapabilityNotSupported)) != 1 || count(es, protocol.MessageCapability, "success") != 1) {
					err = fmt.Errorf("%d records: %+v", len(es), es)
				}
				return err
			})
			for _, e := range es {
				if e.Direction != side.direction || e.From != sender.AgentID() || e.To != provider.AgentID() || e.At.IsZero() || e.DurationMS < 0 || e.ID == "" {
					t.Errorf("record %+v", e)
				}
				if e.Capability == "echo" && (e.Size != len(`{"n":0}`) || (len(e.Params) > 0) != side.bodies) {
					t.Errorf("echo record %+v (params %s)", e, e.Params)
				}
			}
		})
	}
	if _, err := meshtest.Node(t, 132).Audit(ctx, protocol.AuditQuery{}); !errors.Is(err, node.ErrNoAudit) {
		t.Errorf("a node without an audit log: %v", err)
	}
}
