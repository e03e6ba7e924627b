package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/protocol"
)

// fakeAPI is a local API: its capabilities can change, and its calls are
// answered by call.
type fakeAPI struct {
	mu        sync.Mutex
	own       []protocol.Capability
	peers     []protocol.PeerInfo
	calls     []protocol.CallRequest
	cancelled []string
	call      func(ctx context.Context, req protocol.CallRequest, onProgress func(*protocol.Response)) (*protocol.Response, error)
}

func (f *fakeAPI) Capabilities(context.Context) ([]protocol.Capability, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]protocol.Capability(nil), f.own...), nil
}

func (f *fakeAPI) Peers(context.Context) ([]protocol.PeerInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]protocol.PeerInfo(nil), f.peers...), nil
}

func (f *fakeAPI) MeshCallAny(ctx context.Context, req protocol.CallRequest, onProgress func(*protocol.Response)) (*protocol.Response, string, error) {
	f.mu.Lock()
	f.calls = append(f.calls, req)
	call := f.call
	f.mu.Unlock()
	r, err := call(ctx, req, onProgress)
	return r, "agent", err
}

func (f *fakeAPI) Task(_ context.Context, taskID, _ string, cancel bool) (*protocol.Task, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if cancel {
		f.cancelled = append(f.cancelled, taskID)
	}
	return &protocol.Task{}, nil
}

func (f *fakeAPI) set(own []protocol.Capability) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.own = own
}

var echoCap = protocol.Capability{Name: "echo", Description: "echo",
	InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}},"required":["text"]}`)}

// connect serves s to an SDK client in memory.
func connect(t *testing.T, s *Server, opts *sdk.ClientOptions) *sdk.ClientSession {
	t.Helper()
	ct, st := sdk.NewInMemoryTransports()
	ss, err := s.MCP().Connect(context.Background(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ss.Close() })
	c := sdk.NewClient(&sdk.Implementation{Name: "test"}, opts)
	cs, err := c.Connect(context.Background(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func newServer(t *testing.T, api *fakeAPI, opts ...Option) *Server {
	t.Helper()
	s, err := New(context.Background(), api, append([]Option{WithPollInterval(MinPollInterval)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestServerCalls(t *testing.T) {
	api := &fakeAPI{
		own:   []protocol.Capability{echoCap},
		peers: []protocol.PeerInfo{{AgentID: "p", Capabilities: []protocol.Capability{{Name: "fail"}, {Name: "bar:upper", InputSchema: json.RawMessage(`{"type":"string"}`)}}}},
		call: func(ctx context.Context, req protocol.CallRequest, onProgress func(*protocol.Response)) (*protocol.Response, error) {
			switch req.Action {
			case "fail":
				return nil, protocol.Errorf(protocol.CodeUnauthorized, "not you")
			case "bar:upper":
				for i := range 3 {
					onProgress(&protocol.Response{Result: json.RawMessage(`{"progress":` + []string{"5", "2", `"x"`}[i] + `,"total":10,"message":"m"}`)})
				}
				return &protocol.Response{Result: json.RawMessage(`"UP"`)}, nil
			}
			return &protocol.Response{Result: req.Params}, nil
		},
	}
	s := newServer(t, api)
	var mu sync.Mutex
	var prog []*sdk.ProgressNotificationParams
	cs := connect(t, s, &sdk.ClientOptions{ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
		mu.Lock()
		prog = append(prog, r.Params)
		mu.Unlock()
	}})
	ctx := context.Background()

	if !cs.InitializeResult().Capabilities.Tools.ListChanged {
		t.Fatal("tools.listChanged not declared")
	}
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
	}
	if len(names) != 3 || names[0] != "bar_upper" || names[1] != "echo" || names[2] != "fail" {
		t.Fatalf("tools = %v", names)
	}

	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || res.IsError {
		t.Fatalf("echo: %v %+v", err, res)
	}
	if b, _ := json.Marshal(res.StructuredContent); string(b) != `{"text":"hi"}` || res.Content[0].(*sdk.TextContent).Text != `{"text":"hi"}` {
		t.Fatalf("echo result %s / %v", b, res.Content)
	}

	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"text": 5}})
	if err != nil || !res.IsError {
		t.Fatalf("schema violation: %v %+v", err, res)
	}
	api.mu.Lock()
	n := len(api.calls)
	api.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d calls reached the mesh; the refused one must not", n)
	}

	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "fail"})
	if err != nil || !res.IsError || res.Content[0].(*sdk.TextContent).Text != "UNAUTHORIZED: not you" {
		t.Fatalf("fail: %v %+v", err, res)
	}

	p := &sdk.CallToolParams{Name: "bar_upper", Arguments: map[string]any{"value": "up"}}
	p.SetProgressToken("tok")
	res, err = cs.CallTool(ctx, p)
	if err != nil || res.IsError {
		t.Fatalf("bar_upper: %v %+v", err, res)
	}
	if b, _ := json.Marshal(res.StructuredContent); string(b) != `{"result":"UP"}` {
		t.Fatalf("bar_upper result %s", b)
	}
	api.mu.Lock()
	last := api.calls[len(api.calls)-1]
	api.mu.Unlock()
	if last.Action != "bar:upper" || string(last.Params) != `"up"` {
		t.Fatalf("mesh call %+v", last)
	}
	wait.For(t, 10*time.Second, func() error {
		mu.Lock()
		defer mu.Unlock()
		if len(prog) != 3 {
			return errors.New("progress not all here")
		}
		return nil
	})
	want := []float64{5, 6, 7}
	for i, pr := range prog {
		if pr.Progress != want[i] || pr.Total != 10 || pr.Message != "m" || pr.ProgressToken != "tok" {
			t.Errorf("progress %d = %+v, want %v", i, pr, want[i])
		}
	}
}

// TestServerCallTimeout: a tools/call is a mesh call bounded by the
// server's call timeout, DefaultCallTimeout unless WithCallTimeout says
// otherwise; a timeout that is not positive is refused.
func TestServerCallTimeout(t *testing.T) {
	for _, tc := range []struct {
		opts []Option
		want time.Duration
	}{
		{nil, DefaultCallTimeout},
		{[]Option{WithCallTimeout(3 * time.Second)}, 3 * time.Second},
	} {
		api := &fakeAPI{own: []protocol.Capability{echoCap},
			call: func(_ context.Context, req protocol.CallRequest, _ func(*protocol.Response)) (*protocol.Response, error) {
				return &protocol.Response{Status: protocol.StatusSuccess, Result: req.Params}, nil
			}}
		cs := connect(t, newServer(t, api, tc.opts...), nil)
		if _, err := cs.CallTool(context.Background(), &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}}); err != nil {
			t.Fatal(err)
		}
		api.mu.Lock()
		if len(api.calls) != 1 || api.calls[0].Timeout != tc.want {
			t.Errorf("mesh calls %+v, want one with timeout %v", api.calls, tc.want)
		}
		api.mu.Unlock()
	}
	if _, err := New(context.Background(), &fakeAPI{}, WithCallTimeout(0)); err == nil {
		t.Error("a call timeout of 0 was taken")
	}
}

func TestServerCancel(t *testing.T) {
	started := make(chan string, 1)
	api := &fakeAPI{own: []protocol.Capability{{Name: "slow"}},
		call: func(ctx context.Context, req protocol.CallRequest, _ func(*protocol.Response)) (*protocol.Response, error) {
			started <- req.CorrelationID
			<-ctx.Done()
			return nil, ctx.Err()
		}}
	s := newServer(t, api)
	cs := connect(t, s, nil)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "slow"})
		errc <- err
	}()
	task := wait.Receive(t, 10*time.Second, started, "the mesh call")
	cancel()
	if err := wait.Receive(t, 10*time.Second, errc, "the cancelled call"); err == nil {
		t.Fatal("cancelled call returned no error")
	}
	wait.For(t, 10*time.Second, func() error {
		api.mu.Lock()
		defer api.mu.Unlock()
		if len(api.cancelled) != 1 || api.cancelled[0] != task {
			return errors.New("mesh task not cancelled")
		}
		return nil
	})
}

func TestServerListChanged(t *testing.T) {
	api := &fakeAPI{own: []protocol.Capability{echoCap}}
	s := newServer(t, api)
	changed := make(chan struct{}, 10)
	cs := connect(t, s, &sdk.ClientOptions{ToolListChangedHandler: func(context.Context, *sdk.ToolListChangedRequest) {
		changed <- struct{}{}
	}})
	ctx := context.Background()
	list := func() []string {
		lt, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var n []string
		for _, tl := range lt.Tools {
			n = append(n, tl.Name)
		}
		return n
	}
	api.set([]protocol.Capability{echoCap, {Name: "new"}})
	wait.Receive(t, 10*time.Second, changed, "list_changed after a capability appeared")
	if n := list(); len(n) != 2 || n[1] != "new" {
		t.Fatalf("tools = %v", n)
	}
	api.set([]protocol.Capability{{Name: "new"}})
	wait.Receive(t, 10*time.Second, changed, "list_changed after a capability went")
	if n := list(); len(n) != 1 || n[0] != "new" {
		t.Fatalf("tools = %v", n)
	}
}

func TestLoopbackOrigin(t *testing.T) {
	for o, want := range map[string]bool{
		"http://localhost:3000": true, "http://127.0.0.1": true, "http://[::1]:8080": true,
		"http://evil.example": false, "null": false, "http://localhost.evil.com": false,
	} {
		if got := loopbackOrigin(o); got != want {
			t.Errorf("loopbackOrigin(%q) = %v", o, got)
		}
	}
}
