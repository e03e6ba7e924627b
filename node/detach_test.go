package node_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

const (
	dtProvider  = 70
	dtRequester = 71
)

// gate is a handler that waits for its release.
func gate(release <-chan struct{}) node.Service {
	return node.Service{Capability: protocol.Capability{Name: "review"}, Handler: node.HandlerFunc(func(ctx context.Context, c *node.Call) (json.RawMessage, error) {
		select {
		case <-release:
			return json.RawMessage(`{"verdict":"approved"}`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})}
}

// TestSubmitThenWait: a detached submission returns once the provider
// accepted it, while its handler still runs; TaskWait gets the answer.
func TestSubmitThenWait(t *testing.T) {
	release := make(chan struct{})
	p := meshtest.Node(t, dtProvider, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "p.db"))), node.WithServices(gate(release)))
	r := meshtest.Node(t, dtRequester, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "r.db"))))
	meshtest.Connect(t, r, p)
	ctx := meshtest.Context(t, 30*time.Second)
	sub, err := r.Submit(ctx, protocol.CallRequest{To: p.AgentID(), Action: "review", Params: json.RawMessage(`{}`)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if sub.TaskID == "" || sub.AgentID != p.AgentID() || sub.State != protocol.TaskApproved {
		t.Fatalf("submitted %+v", sub)
	}
	tasks, err := r.Tasks(ctx, "")
	if err != nil || len(tasks) != 1 || tasks[0].Role != "submitted" || tasks[0].TaskID != sub.TaskID {
		t.Fatalf("requester's tasks %+v %v", tasks, err)
	}
	served, err := p.Tasks(ctx, protocol.TaskApproved)
	if err != nil || len(served) != 1 || served[0].TaskID != sub.TaskID {
		t.Fatalf("provider's tasks %+v %v", served, err)
	}
	close(release)
	got, err := r.TaskWait(ctx, sub.TaskID, 50*time.Millisecond, nil)
	if err != nil || got.State != protocol.TaskCompleted || string(got.Result) != `{"verdict":"approved"}` {
		t.Fatalf("wait: %+v %v", got, err)
	}
}

// TestSubmitProgressIsKept: a detached task's handler reports progress
// with nobody following its stream; the progress neither fails the task
// nor is lost, and TaskWait passes on every step, also those that came
// after the final answer was recorded.
func TestSubmitProgressIsKept(t *testing.T) {
	steps := node.Service{Capability: protocol.Capability{Name: "steps"}, Handler: node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
		for _, s := range []string{`{"step":1}`, `{"step":2}`, `{"step":3}`} {
			if err := c.Progress(json.RawMessage(s)); err != nil {
				return nil, err
			}
		}
		return json.RawMessage(`{"done":true}`), nil
	})}
	p := meshtest.Node(t, dtProvider, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "p.db"))), node.WithServices(steps))
	r := meshtest.Node(t, dtRequester, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "r.db"))))
	meshtest.Connect(t, r, p)
	ctx := meshtest.Context(t, 30*time.Second)
	sub, err := r.Submit(ctx, protocol.CallRequest{To: p.AgentID(), Action: "steps", Params: json.RawMessage(`{}`)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	got, err := r.TaskWait(ctx, sub.TaskID, 20*time.Millisecond, func(p json.RawMessage) { seen = append(seen, string(p)) })
	if err != nil || got.State != protocol.TaskCompleted || string(got.Result) != `{"done":true}` {
		t.Fatalf("wait: %+v %v", got, err)
	}
	if strings.Join(seen, ",") != `{"step":1},{"step":2},{"step":3}` || len(got.Progress) != 3 {
		t.Fatalf("progress seen %v, recorded %s", seen, got.Progress)
	}
}

// TestSubmitRequesterAwayGetsSignedAnswer: the requester goes away
// before its task ends; when it is back (a new node on the same store)
// the provider's outbox delivers the signed final answer, which the
// requester records, and TaskWait answers from that record with the
// provider gone.
func TestSubmitRequesterAwayGetsSignedAnswer(t *testing.T) {
	release := make(chan struct{})
	p := meshtest.Node(t, dtProvider, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "p.db"))), node.WithServices(gate(release)),
		node.WithOutboxRetry(200*time.Millisecond))
	rPath := filepath.Join(t.TempDir(), "r.db")
	rst := openStore(t, rPath)
	r := meshtest.Node(t, dtRequester, node.WithStore(rst))
	meshtest.Connect(t, r, p)
	ctx := meshtest.Context(t, 60*time.Second)
	sub, err := r.Submit(ctx, protocol.CallRequest{To: p.AgentID(), Action: "review", Params: json.RawMessage(`{}`)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := rst.Close(); err != nil {
		t.Fatal(err)
	}
	close(release)
	r = meshtest.Node(t, dtRequester, node.WithStore(openStore(t, rPath)))
	meshtest.Connect(t, r, p)
	// Wait for the outbox's delivery: the record gets the envelope.
	var got *protocol.SubmittedTask
	for {
		got, err = r.TaskWait(ctx, sub.TaskID, 50*time.Millisecond, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Envelope != nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no signed answer delivered")
		}
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	got, err = r.TaskWait(ctx, sub.TaskID, 50*time.Millisecond, nil)
	if err != nil || got.State != protocol.TaskCompleted || string(got.Result) != `{"verdict":"approved"}` {
		t.Fatalf("wait from the record: %+v %v", got, err)
	}
	rc, err := protocol.OpenReceipt(got.Envelope)
	if err != nil {
		t.Fatal(err)
	}
	if err := rc.Check(p.AgentID(), rc.Response.CorrelationID); err != nil {
		t.Fatal(err)
	}
}
