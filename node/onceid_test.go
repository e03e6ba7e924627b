package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// TestRequestRunsOncePerID: a requester that sends a request again under
// the same request id (a retry after a lost answer) does not make the
// provider run it again. A retry while the request runs receives its
// remaining progress and its result, as the first stream does; a retry
// after it finished gets the recorded answer, success or error; another
// requester using the same id makes its own request.
func TestRequestRunsOncePerID(t *testing.T) {
	var (
		mu   sync.Mutex
		runs = map[string]int{} // requester/request id -> handler runs
	)
	count := func(c *node.Call) {
		mu.Lock()
		runs[c.From.String()+"/"+c.Request.CorrelationID]++
		mu.Unlock()
	}
	runsOf := func(n *node.Node, id string) int {
		mu.Lock()
		defer mu.Unlock()
		return runs[n.AgentID()+"/"+id]
	}
	started := make(chan struct{}, 8)
	step := make(chan struct{}, 1)
	release := make(chan struct{})
	slow := node.HandlerFunc(func(ctx context.Context, c *node.Call) (json.RawMessage, error) {
		count(c)
		started <- struct{}{}
		for i := 0; ; i++ {
			select {
			case <-step:
				_ = c.Progress(json.RawMessage(fmt.Sprintf(`{"step":%d}`, i)))
			case <-release:
				return json.Marshal(map[string]any{"from": c.From.String(), "params": c.Request.Params})
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	})
	failing := node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
		count(c)
		return nil, protocol.Errorf(protocol.CodeUnauthorized, "the reviewer said no")
	})
	whoami := node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
		mu.Lock()
		runs[c.From.String()+"/"+c.OnBehalfOf+"/"+c.Request.CorrelationID]++
		mu.Unlock()
		return json.Marshal(map[string]string{"client": c.OnBehalfOf})
	})
	provider := meshtest.Node(t, 130, node.WithServices(
		node.Service{Capability: protocol.Capability{Name: "whoami"}, Handler: whoami},
		node.Service{Capability: protocol.Capability{Name: "work"}, Handler: slow},
		node.Service{Capability: protocol.Capability{Name: "refuse"}, Handler: failing}))
	requester, other := meshtest.Node(t, 131), meshtest.Node(t, 132)
	meshtest.Connect(t, requester, provider)
	meshtest.Connect(t, other, provider)
	ctx := meshtest.Context(t, 30*time.Second)
	const id = "once-1"
	params := json.RawMessage(`{"x":1}`)
	want := fmt.Sprintf(`{"from":%q,"params":{"x":1}}`, requester.AgentID())

	// The first request, on a stream of its own.
	s1 := rawStream(t, requester, provider)
	if _, err := s1.Write(requestFrame(t, signer(t, 131), provider.ID(), craft{corrID: id, envelope: func(e *protocol.Envelope) {
		e.Payload = json.RawMessage(`{"action":"work","correlationId":"once-1","params":{"x":1}}`)
	}})); err != nil {
		t.Fatal(err)
	}
	<-started

	// The retry, while the first runs: it is attached to the running task
	// (it receives its progress) and gets its result.
	progressed := make(chan struct{}, 1)
	retried := make(chan error, 1)
	var retryResult json.RawMessage
	go func() {
		resp, err := requester.Call(ctx, protocol.CallRequest{To: provider.AgentID(), Action: "work", Params: params, CorrelationID: id,
			Progress: func(*protocol.Response) {
				select {
				case progressed <- struct{}{}:
				default:
				}
			}})
		if err == nil {
			retryResult = resp.Result
		}
		retried <- err
	}()
	wait.For(t, 10*time.Second, func() error {
		select {
		case <-progressed:
			return nil
		default:
		}
		select {
		case step <- struct{}{}:
		default:
		}
		return errors.New("the retry has received no progress of the running request")
	})
	close(release)
	if err := <-retried; err != nil {
		t.Fatalf("retry while running: %v", err)
	}
	if string(retryResult) != want {
		t.Errorf("retry while running got %s, want %s", retryResult, want)
	}
	// The first stream gets the same answer (after its progress).
	for {
		resp, err := readAnswer(t, s1, provider.ID())
		if err != nil {
			t.Fatalf("first request: %v", err)
		}
		if resp.Status == protocol.StatusInProgress {
			continue
		}
		if string(resp.Result) != want {
			t.Errorf("first request got %s, want %s", resp.Result, want)
		}
		break
	}

	// A retry after it finished gets the recorded answer.
	resp, err := requester.Call(ctx, protocol.CallRequest{To: provider.AgentID(), Action: "work", Params: params, CorrelationID: id})
	if err != nil || string(resp.Result) != want {
		t.Errorf("retry after finishing: %v %v", resp, err)
	}
	if n := runsOf(requester, id); n != 1 {
		t.Errorf("request %s ran %d times, want 1", id, n)
	}

	// The same id for another request is refused, and runs nothing.
	if _, err := requester.Call(ctx, protocol.CallRequest{To: provider.AgentID(), Action: "work", Params: json.RawMessage(`{"x":2}`), CorrelationID: id}); protocol.CodeOf(err) != protocol.CodeInvalidMessage {
		t.Errorf("another request under a used id: %v", err)
	}

	// A failure is recorded too: the retry gets the same error.
	for i := range 2 {
		_, err := requester.Call(ctx, protocol.CallRequest{To: provider.AgentID(), Action: "refuse", CorrelationID: "once-2"})
		if pe := (*protocol.Error)(nil); !errors.As(err, &pe) || pe.Code != protocol.CodeUnauthorized || pe.Message != "the reviewer said no" {
			t.Errorf("attempt %d of a refused request: %v", i+1, err)
		}
	}
	if n := runsOf(requester, "once-2"); n != 1 {
		t.Errorf("refused request ran %d times, want 1", n)
	}

	// Another requester with the same id makes its own request.
	resp, err = other.Call(ctx, protocol.CallRequest{To: provider.AgentID(), Action: "work", Params: json.RawMessage(`{"x":3}`), CorrelationID: id})
	if wantOther := fmt.Sprintf(`{"from":%q,"params":{"x":3}}`, other.AgentID()); err != nil || string(resp.Result) != wantOther {
		t.Errorf("another requester, same id: %v %v, want %s", resp, err, wantOther)
	}
	if n, m := runsOf(other, id), runsOf(requester, id); n != 1 || m != 1 {
		t.Errorf("runs: other's request %d, requester's %d; want 1 and 1", n, m)
	}
	// So do two clients one agent vouches for (a relay's lobby agents).
	for i := range 2 {
		for _, client := range []string{"lobby:alice", "lobby:bob"} {
			resp, err := requester.Call(ctx, protocol.CallRequest{To: provider.AgentID(), Action: "whoami", CorrelationID: "once-3", OnBehalfOf: client})
			if err != nil {
				t.Fatalf("attempt %d for %s: %v", i+1, client, err)
			}
			if want := fmt.Sprintf(`{"client":%q}`, client); string(resp.Result) != want {
				t.Errorf("attempt %d for %s got %s, want %s", i+1, client, resp.Result, want)
			}
			if n := runsOf(requester, client+"/once-3"); n != 1 {
				t.Errorf("attempt %d: %s's request ran %d times, want 1", i+1, client, n)
			}
		}
	}
	for _, n := range []*node.Node{requester, other} {
		tk, err := n.TaskStatus(ctx, id, provider.AgentID())
		if err != nil || tk.Requester != n.AgentID() || tk.State != protocol.TaskCompleted {
			t.Errorf("%s's task %s: %+v %v", n.AgentID(), id, tk, err)
		}
	}
}
