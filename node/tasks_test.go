package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// TestTasks follows a long request through its states, reads its status
// from the requester (as one would after reconnecting) and cancels it.
func TestTasks(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	long := node.HandlerFunc(func(ctx context.Context, call *node.Call) (json.RawMessage, error) {
		if err := call.Progress(json.RawMessage(`{"step":"validating content"}`)); err != nil {
			return nil, err
		}
		call.SetState(protocol.TaskEscalated, "needs a human")
		started <- struct{}{}
		select {
		case <-release:
			return json.RawMessage(`{"approved":true}`), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	provider := meshtest.Node(t, 120, node.WithServices(
		node.Service{Capability: protocol.Capability{Name: "approval"}, Handler: long},
		node.Service{Capability: protocol.Capability{Name: "refused-by-human"}, Handler: node.HandlerFunc(func(_ context.Context, call *node.Call) (json.RawMessage, error) {
			call.SetState(protocol.TaskEscalated, "needs a human")
			return nil, protocol.Errorf(protocol.CodeUnauthorized, "the reviewer said no")
		})},
		node.Service{Capability: protocol.Capability{Name: "broken"}, Handler: node.HandlerFunc(func(context.Context, *node.Call) (json.RawMessage, error) {
			return nil, fmt.Errorf("disk full")
		})},
		node.Service{Capability: protocol.Capability{Name: "strict", InputSchema: json.RawMessage(`{"type":"object","required":["content"]}`)}, Handler: node.EchoHandler()}))
	requester, other := meshtest.Node(t, 121), meshtest.Node(t, 122)
	meshtest.Connect(t, requester, provider)
	meshtest.Connect(t, other, provider)
	ctx := meshtest.Context(t, 30*time.Second)

	states := func(tk *protocol.Task) string {
		var s []string
		for _, e := range tk.History {
			s = append(s, string(e.State))
		}
		return strings.Join(s, ">")
	}

	t.Run("completed", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			_, err := requester.Call(ctx, protocol.CallRequest{To: provider.AgentID(), Action: "approval", CorrelationID: "task-1"})
			done <- err
		}()
		<-started
		tk, err := requester.TaskStatus(ctx, "task-1", "")
		if err != nil {
			t.Fatal(err)
		}
		if tk.State != protocol.TaskEscalated || states(tk) != "VALIDATING>APPROVED>ESCALATED" || len(tk.Progress) != 1 || tk.Requester != requester.AgentID() {
			t.Fatalf("running task %+v", tk)
		}
		// Another agent has no task task-1 there: it cannot read this one.
		if _, err := other.TaskStatus(ctx, "task-1", provider.AgentID()); protocol.CodeOf(err) != protocol.CodeInvalidMessage {
			t.Errorf("another agent read the task: %v", err)
		}
		release <- struct{}{}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		tk, err = requester.TaskStatus(ctx, "task-1", provider.AgentID())
		if err != nil || tk.State != protocol.TaskCompleted || string(tk.Result) != `{"approved":true}` {
			t.Fatalf("finished task %+v %v", tk, err)
		}
	})

	t.Run("cancelled mid-way", func(t *testing.T) {
		done := make(chan error, 1)
		go func() {
			_, err := requester.Call(ctx, protocol.CallRequest{To: provider.AgentID(), Action: "approval", CorrelationID: "task-2"})
			done <- err
		}()
		<-started
		tk, err := requester.CancelTask(ctx, "task-2", "")
		if err != nil {
			t.Fatal(err)
		}
		err = <-done
		if err == nil || !strings.Contains(err.Error(), "cancelled by its requester") {
			t.Fatalf("the cancelled call returned %v", err)
		}
		wait.For(t, 10*time.Second, func() error {
			if tk, err = requester.TaskStatus(ctx, "task-2", ""); err != nil || tk.State != protocol.TaskCancelled {
				return fmt.Errorf("task %+v %v", tk, err)
			}
			return nil
		})
	})

	t.Run("rejected", func(t *testing.T) {
		_, err := requester.Call(ctx, protocol.CallRequest{To: provider.AgentID(), Action: "strict", Params: json.RawMessage(`{}`), CorrelationID: "task-3"})
		if protocol.CodeOf(err) != protocol.CodeInvalidMessage {
			t.Fatalf("%v", err)
		}
		tk, err := requester.TaskStatus(ctx, "task-3", "")
		if err != nil || tk.State != protocol.TaskRejected || tk.Error == nil || states(tk) != "VALIDATING>REJECTED" {
			t.Fatalf("task %+v %v", tk, err)
		}
	})

	t.Run("an escalation turned down is rejected, a handler fault failed", func(t *testing.T) {
		for _, tc := range []struct{ action, id, state, history string }{
			{"refused-by-human", "task-4", "REJECTED", "VALIDATING>APPROVED>ESCALATED>REJECTED"},
			{"broken", "task-5", "FAILED", "VALIDATING>APPROVED>FAILED"},
		} {
			if _, err := requester.Call(ctx, protocol.CallRequest{To: provider.AgentID(), Action: tc.action, CorrelationID: tc.id}); err == nil {
				t.Fatalf("%s: no error", tc.action)
			}
			tk, err := requester.TaskStatus(ctx, tc.id, "")
			if err != nil || string(tk.State) != tc.state || tk.Error == nil || states(tk) != tc.history {
				t.Errorf("%s: task %+v %v", tc.action, tk, err)
			}
		}
	})

	t.Run("unknown task", func(t *testing.T) {
		if _, err := requester.TaskStatus(ctx, "nope", ""); protocol.CodeOf(err) != protocol.CodeInvalidMessage {
			t.Errorf("%v", err)
		}
		if _, err := requester.TaskStatus(ctx, "nope", provider.AgentID()); protocol.CodeOf(err) != protocol.CodeInvalidMessage {
			t.Errorf("%v", err)
		}
	})
}

// TestTaskRefusedForWantOfHandlerRunsOnRetry: a request refused because
// nothing serves its capability never started; a retry under the same id
// once the capability is served runs it (an outbox's later attempt), and
// a retry after that gets the recorded answer without running again.
func TestTaskRefusedForWantOfHandlerRunsOnRetry(t *testing.T) {
	var log runLog
	p := meshtest.Node(t, 140)
	c := meshtest.Node(t, 141)
	meshtest.Connect(t, c, p)
	ctx := meshtest.Context(t, 20*time.Second)
	req := protocol.CallRequest{To: p.AgentID(), Action: "summarize", Params: json.RawMessage(`{"text":"later"}`), CorrelationID: "retry-1"}
	if _, err := c.Call(ctx, req); protocol.CodeOf(err) != protocol.CodeCapabilityNotSupported {
		t.Fatalf("before the handler: %v, want CAPABILITY_NOT_SUPPORTED", err)
	}
	if err := p.SetServices([]node.Service{log.service("summarize")}); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := c.Call(ctx, req); err != nil {
			t.Fatalf("retry %d: %v", i+1, err)
		}
	}
	if text, runs := log.got(); text != "later" || runs != "map[retry-1:1]" {
		t.Fatalf("handled %q, runs %s; want the request once", text, runs)
	}
}
