package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// escalating is a handler that escalates and leaves the answer to the
// decision.
func escalating() node.Service {
	return node.Service{Capability: protocol.Capability{Name: "approve"}, Handler: node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
		if err := c.Escalate("needs a human"); err != nil {
			return nil, err
		}
		return nil, node.ErrEscalated
	})}
}

// awaitState waits until node n's task id is in state s.
func awaitState(t *testing.T, n *node.Node, id string, s protocol.TaskState) {
	t.Helper()
	wait.For(t, 30*time.Second, func() error {
		ts, err := n.Tasks(context.Background(), s)
		if err != nil {
			return err
		}
		for _, ti := range ts {
			if ti.TaskID == id {
				return nil
			}
		}
		return fmt.Errorf("task %s is not %s: %+v", id, s, ts)
	})
}

// TestEscalatedDecisionIsTheAnswer: a handler that only escalates leaves
// its detached task ESCALATED; the operator's approval is the answer
// (COMPLETED, {"approved":true,"reason":…}), its rejection too (REJECTED,
// UNAUTHORIZED with the reason), and a task in another state cannot be
// resolved.
func TestEscalatedDecisionIsTheAnswer(t *testing.T) {
	p := meshtest.Node(t, dtProvider, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "p.db"))), node.WithServices(escalating()))
	r := meshtest.Node(t, dtRequester, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "r.db"))))
	meshtest.Connect(t, r, p)
	ctx := meshtest.Context(t, 60*time.Second)
	submit := func() string {
		t.Helper()
		sub, err := r.Submit(ctx, protocol.CallRequest{To: p.AgentID(), Action: "approve", Params: json.RawMessage(`{}`)}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		awaitState(t, p, sub.TaskID, protocol.TaskEscalated)
		return sub.TaskID
	}

	yes := submit()
	if _, err := p.TaskResolve(ctx, "no-such-task", true, ""); protocol.CodeOf(err) != protocol.CodeInvalidMessage {
		t.Fatalf("resolving an unknown task: %v", err)
	}
	task, err := p.TaskResolve(ctx, yes, true, "looks fine")
	if err != nil || task.State != protocol.TaskCompleted || task.Decision == nil || !task.Decision.Approved {
		t.Fatalf("approve: %+v %v", task, err)
	}
	got, err := r.TaskWait(ctx, yes, 50*time.Millisecond, nil)
	if err != nil || got.State != protocol.TaskCompleted || string(got.Result) != `{"approved":true,"reason":"looks fine"}` {
		t.Fatalf("wait for the approved task: %+v %v", got, err)
	}
	var states []protocol.TaskState
	for _, e := range got.History {
		states = append(states, e.State)
	}
	if fmt.Sprint(states) != "[VALIDATING APPROVED ESCALATED APPROVED COMPLETED]" {
		t.Fatalf("history %v", got.History)
	}
	if _, err := p.TaskResolve(ctx, yes, false, ""); protocol.CodeOf(err) != protocol.CodeInvalidMessage || !strings.Contains(err.Error(), "COMPLETED, not ESCALATED") {
		t.Fatalf("resolving a finished task: %v", err)
	}

	no := submit()
	task, err = p.TaskResolve(ctx, no, false, "out of policy")
	if err != nil || task.State != protocol.TaskRejected {
		t.Fatalf("reject: %+v %v", task, err)
	}
	got, err = r.TaskWait(ctx, no, 50*time.Millisecond, nil)
	if protocol.CodeOf(err) != protocol.CodeUnauthorized || !strings.Contains(err.Error(), "out of policy") || got == nil || got.State != protocol.TaskRejected {
		t.Fatalf("wait for the rejected task: %+v %v", got, err)
	}
}

// TestEscalatedHandlerLearnsDecision: a handler that escalates and waits
// for the decision learns it and answers itself.
func TestEscalatedHandlerLearnsDecision(t *testing.T) {
	learnt := make(chan protocol.TaskDecision, 1)
	svc := node.Service{Capability: protocol.Capability{Name: "approve"}, Handler: node.HandlerFunc(func(ctx context.Context, c *node.Call) (json.RawMessage, error) {
		if err := c.Escalate("over budget"); err != nil {
			return nil, err
		}
		d, err := c.Decision(ctx)
		if err != nil {
			return nil, err
		}
		learnt <- d
		if !d.Approved {
			return nil, protocol.Errorf(protocol.CodeUnauthorized, "declined: %s", d.Reason)
		}
		return json.RawMessage(`{"booked":true}`), nil
	})}
	p := meshtest.Node(t, dtProvider, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "p.db"))), node.WithServices(svc))
	r := meshtest.Node(t, dtRequester, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "r.db"))))
	meshtest.Connect(t, r, p)
	ctx := meshtest.Context(t, 60*time.Second)
	for _, approve := range []bool{true, false} {
		sub, err := r.Submit(ctx, protocol.CallRequest{To: p.AgentID(), Action: "approve", Params: json.RawMessage(`{}`)}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		awaitState(t, p, sub.TaskID, protocol.TaskEscalated)
		if _, err := p.TaskResolve(ctx, sub.TaskID, approve, "by the book"); err != nil {
			t.Fatal(err)
		}
		if d := <-learnt; d.Approved != approve || d.Reason != "by the book" {
			t.Fatalf("the handler learnt %+v", d)
		}
		got, err := r.TaskWait(ctx, sub.TaskID, 50*time.Millisecond, nil)
		switch {
		case approve && (err != nil || string(got.Result) != `{"booked":true}`):
			t.Fatalf("approved: %+v %v", got, err)
		case !approve && (protocol.CodeOf(err) != protocol.CodeUnauthorized || got == nil || got.State != protocol.TaskRejected):
			// The handler's error while ESCALATED is the rejection.
			t.Fatalf("rejected: %+v %v", got, err)
		}
	}
}

// TestEscalatedTaskSurvivesRestart: a provider closes while a detached
// task awaits its decision; the restarted provider still has it
// ESCALATED, resolves it, and the requester gets the decision as the
// answer.
func TestEscalatedTaskSurvivesRestart(t *testing.T) {
	pPath := filepath.Join(t.TempDir(), "p.db")
	pst := openStore(t, pPath)
	p := meshtest.Node(t, dtProvider, node.WithStore(pst), node.WithServices(escalating()))
	r := meshtest.Node(t, dtRequester, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "r.db"))))
	meshtest.Connect(t, r, p)
	ctx := meshtest.Context(t, 60*time.Second)
	sub, err := r.Submit(ctx, protocol.CallRequest{To: p.AgentID(), Action: "approve", Params: json.RawMessage(`{}`)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	awaitState(t, p, sub.TaskID, protocol.TaskEscalated)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pst.Close(); err != nil {
		t.Fatal(err)
	}
	p = meshtest.Node(t, dtProvider, node.WithStore(openStore(t, pPath)), node.WithServices(escalating()))
	awaitState(t, p, sub.TaskID, protocol.TaskEscalated)
	meshtest.Connect(t, r, p)
	task, err := p.TaskResolve(ctx, sub.TaskID, true, "after the restart")
	if err != nil || task.State != protocol.TaskCompleted {
		t.Fatalf("resolve after the restart: %+v %v", task, err)
	}
	got, err := r.TaskWait(ctx, sub.TaskID, 50*time.Millisecond, nil)
	if err != nil || string(got.Result) != `{"approved":true,"reason":"after the restart"}` {
		t.Fatalf("wait: %+v %v", got, err)
	}
}

// TestEscalateWithoutTask: a call that runs without a task (a call
// outside the task table) cannot escalate; ErrEscalated wrapped is still
// ErrEscalated.
func TestEscalateWithoutTask(t *testing.T) {
	var c node.Call
	if err := c.Escalate("x"); err == nil {
		t.Fatal("escalated a call without a task")
	}
	if !errors.Is(fmt.Errorf("handler: %w", node.ErrEscalated), node.ErrEscalated) {
		t.Fatal("wrapped ErrEscalated not matched")
	}
}

// TestTaskEvents: a subscriber to the provider's task events sees seed
// 003's request.submitted, request.approved, request.escalated, then the
// operator's request.approved and the task's end, with the reasons.
func TestTaskEvents(t *testing.T) {
	p := meshtest.Node(t, dtProvider, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "p.db"))), node.WithServices(escalating()))
	r := meshtest.Node(t, dtRequester, node.WithStore(openStore(t, filepath.Join(t.TempDir(), "r.db"))))
	meshtest.Connect(t, r, p)
	events := make(chan protocol.TaskChange, 16)
	cancel, err := p.SubscribeTaskEvents(func(c protocol.TaskChange) { events <- c })
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	ctx := meshtest.Context(t, 60*time.Second)
	sub, err := r.Submit(ctx, protocol.CallRequest{To: p.AgentID(), Action: "approve", Params: json.RawMessage(`{}`)}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	awaitState(t, p, sub.TaskID, protocol.TaskEscalated)
	if _, err := p.TaskResolve(ctx, sub.TaskID, true, "ok"); err != nil {
		t.Fatal(err)
	}
	var got []string
	for len(got) < 5 {
		select {
		case c := <-events:
			if c.TaskID != sub.TaskID || c.Requester != r.AgentID() || c.Capability != "approve" {
				t.Fatalf("event %+v", c)
			}
			got = append(got, c.Event+"("+c.Reason+")")
		case <-ctx.Done():
			t.Fatalf("events %v", got)
		}
	}
	want := "[request.submitted() request.approved() request.escalated(needs a human) request.approved(approved by the operator: ok) request.completed()]"
	if fmt.Sprint(got) != want {
		t.Fatalf("events %v, want %s", got, want)
	}
}
