package bus_test

import (
	"path/filepath"
	"testing"

	"github.com/meshagent/meshagent/bus"
	"github.com/meshagent/meshagent/internal/fakemesh"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/sign"
)

// TestBusMeshAgentReceipt: the ack of a message to agent:<mesh agent>
// carries the agent's receipt; a local subscriber's ack has none.
func TestBusMeshAgentReceipt(t *testing.T) {
	_, url := busServer(t, fakemesh.New(), openStore(t, filepath.Join(t.TempDir(), "bus.db")))
	sender := newPeer(t, url, "sender", nil)
	var res bus.SendResult
	if err := sender.Call(ctxT(t), bus.MethodSendMessage, map[string]any{"topic": "agent:" + peerID, "payload": map[string]any{"type": "echo", "text": "hi"}}, &res); err != nil {
		t.Fatal(err)
	}
	if !res.Success || len(res.Acks) != 1 || !res.Acks[0].Processed || res.Acks[0].ClientID != peerID {
		t.Fatalf("result %+v", res)
	}
	if res.Acks[0].Receipt == nil {
		t.Fatalf("no receipt in %+v", res.Acks[0])
	}
	r, err := protocol.OpenReceipt(*res.Acks[0].Receipt)
	if err != nil {
		t.Fatalf("OpenReceipt: %v\n%s", err, *res.Acks[0].Receipt)
	}
	if err := r.Check(peerID, ""); err != nil {
		t.Error(err)
	}
	if got, err := sign.Canonicalize([]byte(res.Acks[0].Message)); err != nil || string(got) != string(r.Response.Result) {
		t.Errorf("the receipt says %s, the ack %s", r.Response.Result, res.Acks[0].Message)
	}

	local := newPeer(t, url, "local", func(delivery) (any, error) { return map[string]any{"processed": true}, nil })
	local.subscribe(t, map[string]any{"topic": "work:*"})
	res = sender.send(t, "work:1", "hello")
	if len(res.Acks) != 1 || res.Acks[0].Receipt != nil {
		t.Errorf("local ack %+v", res.Acks)
	}
}
