package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// receiptCall calls action on to and returns the response and every
// receipt the call handed over.
func receiptCall(t *testing.T, from *node.Node, to, action, corrID string) (*protocol.Response, []json.RawMessage, error) {
	t.Helper()
	var receipts []json.RawMessage
	resp, err := from.Call(meshtest.Context(t, 20*time.Second), protocol.CallRequest{
		To: to, Action: action, Params: json.RawMessage(`{"text":"hi"}`), Timeout: 10 * time.Second, CorrelationID: corrID,
		Progress: func(*protocol.Response) {},
		Signed:   func(s json.RawMessage) { receipts = append(receipts, s) },
	})
	return resp, receipts, err
}

func TestReceipt(t *testing.T) {
	steps := node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
		if err := c.Progress(json.RawMessage(`{"step":1}`)); err != nil {
			return nil, err
		}
		return json.RawMessage(`{"done":true}`), nil
	})
	refuse := node.HandlerFunc(func(context.Context, *node.Call) (json.RawMessage, error) {
		return nil, protocol.Errorf(protocol.CodeInternalError, "no")
	})
	p := meshtest.Node(t, 2, node.WithServices(
		node.Service{Capability: protocol.Capability{Name: "steps"}, Handler: steps},
		node.Service{Capability: protocol.Capability{Name: "refuse"}, Handler: refuse},
	))
	a := meshtest.Node(t, 1, node.WithServices(echoService("echo")))
	meshtest.Connect(t, a, p)

	t.Run("from the provider, for the request", func(t *testing.T) {
		resp, receipts, err := receiptCall(t, a, p.AgentID(), "steps", "task-receipt-1")
		if err != nil {
			t.Fatal(err)
		}
		if len(receipts) != 1 {
			t.Fatalf("%d receipts, want the final response's alone", len(receipts))
		}
		r, err := protocol.OpenReceipt(receipts[0])
		if err != nil {
			t.Fatalf("OpenReceipt: %v\n%s", err, receipts[0])
		}
		if err := r.Check(p.AgentID(), "task-receipt-1"); err != nil {
			t.Error(err)
		}
		if !bytes.Equal(r.Response.Result, resp.Result) || r.Response.Status != protocol.StatusSuccess {
			t.Errorf("receipt says %s %s, the call returned %s", r.Response.Status, r.Response.Result, resp.Result)
		}
		if r.Envelope.To == nil || r.Envelope.To.AgentID != a.AgentID() {
			t.Errorf("receipt addressed to %+v, not the caller %s", r.Envelope.To, a.AgentID())
		}
		wantCode(t, r.Check(a.AgentID(), ""), protocol.CodeInvalidSignature)
		wantCode(t, r.Check("", "task-receipt-2"), protocol.CodeInvalidMessage)

		altered := bytes.Replace(receipts[0], []byte(`"done":true`), []byte(`"done":fals`), 1)
		if _, err := protocol.OpenReceipt(altered); err == nil {
			t.Error("an altered receipt verified")
		}
		altered = bytes.Replace(receipts[0], []byte("task-receipt-1"), []byte("task-receipt-2"), 1)
		_, err = protocol.OpenReceipt(altered)
		wantCode(t, err, protocol.CodeInvalidSignature)
	})

	t.Run("from itself", func(t *testing.T) {
		_, receipts, err := receiptCall(t, a, a.AgentID(), "echo", "task-receipt-self")
		if err != nil || len(receipts) != 1 {
			t.Fatalf("%d receipts, %v", len(receipts), err)
		}
		r, err := protocol.OpenReceipt(receipts[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Check(a.AgentID(), "task-receipt-self"); err != nil {
			t.Error(err)
		}
	})

	t.Run("none for an error", func(t *testing.T) {
		_, receipts, err := receiptCall(t, a, p.AgentID(), "refuse", "")
		wantCode(t, err, protocol.CodeInternalError)
		if len(receipts) != 0 {
			t.Errorf("a failed call handed over %d receipts", len(receipts))
		}
	})

	t.Run("from the provider any-call chose", func(t *testing.T) {
		var receipt json.RawMessage
		_, agent, err := a.CallAny(meshtest.Context(t, 20*time.Second), protocol.CallRequest{
			Action: "steps", Timeout: 10 * time.Second, Signed: func(s json.RawMessage) { receipt = s },
		})
		if err != nil {
			t.Fatal(err)
		}
		r, err := protocol.OpenReceipt(receipt)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Check(agent, ""); err != nil || agent != p.AgentID() {
			t.Errorf("answered by %s: %v", agent, err)
		}
	})
}
