package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/p2ptest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

func TestMain(m *testing.M) { p2ptest.VerifyTestMain(m) }

func echoService(name string) node.Service {
	return node.Service{Capability: protocol.Capability{Name: name, Description: "echo"}, Handler: node.EchoHandler()}
}

func call(t *testing.T, from *node.Node, to *node.Node, action, params string) (*protocol.Response, error) {
	t.Helper()
	return from.Call(meshtest.Context(t, 20*time.Second), protocol.CallRequest{
		To: to.AgentID(), Action: action, Params: json.RawMessage(params), Timeout: 10 * time.Second,
	})
}

func wantCode(t *testing.T, err error, code protocol.Code) *protocol.Error {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		t.Fatalf("got error %v (%T), want *protocol.Error with code %s", err, err, code)
	}
	if pe.Code != code {
		t.Fatalf("got code %s (%s), want %s", pe.Code, pe.Message, code)
	}
	return pe
}

func TestHelloSeenBothWays(t *testing.T) {
	a := meshtest.Node(t, 1, node.WithServices(echoService("translate")))
	b := meshtest.Node(t, 2, node.WithServices(echoService("summarize"), echoService("myagent:code-review")))
	meshtest.Connect(t, a, b)

	caps, _ := a.PeerCapabilities(b.ID())
	if got := names(caps); got != "myagent:code-review,summarize" {
		t.Errorf("a sees b's capabilities %q", got)
	}
	caps, _ = b.PeerCapabilities(a.ID())
	if got := names(caps); got != "translate" {
		t.Errorf("b sees a's capabilities %q", got)
	}
	var found bool
	for _, p := range a.Peers() {
		if p.AgentID == b.AgentID() {
			found = true
			if p.Name != "agent-2" || !p.Connected || len(p.Addrs) == 0 || p.PublicKey == "" {
				t.Errorf("peer info %+v", p)
			}
		}
	}
	if !found {
		t.Fatal("b missing from a.Peers()")
	}
}

func TestHelloAgainOnCapabilityChange(t *testing.T) {
	a := meshtest.Node(t, 1)
	b := meshtest.Node(t, 2, node.WithServices(echoService("v1")))
	meshtest.Connect(t, a, b)
	if err := b.SetServices([]node.Service{echoService("v2"), echoService("v3")}); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, func() error {
		caps, _ := a.PeerCapabilities(b.ID())
		if got := names(caps); got != "v2,v3" {
			return fmt.Errorf("a sees %q", got)
		}
		return nil
	})
}

func names(caps []protocol.Capability) string {
	s := make([]string, len(caps))
	for i, c := range caps {
		s[i] = c.Name
	}
	return strings.Join(s, ",")
}

func TestCall(t *testing.T) {
	schema := json.RawMessage(`{"type":"object","required":["text"],"properties":{"text":{"type":"string","maxLength":20}},"additionalProperties":false}`)
	outSchema := json.RawMessage(`{"type":"object","required":["n"]}`)
	caller := meshtest.ID(t, 1)
	provider := meshtest.Node(t, 2, node.WithServices(
		echoService("echo"),
		node.Service{Capability: protocol.Capability{Name: "strict", InputSchema: schema}, Handler: node.EchoHandler()},
		node.Service{Capability: protocol.Capability{Name: "private", AuthorizedRequesterIDs: []string{meshtest.ID(t, 3).String()}}, Handler: node.EchoHandler()},
		node.Service{Capability: protocol.Capability{Name: "mine", AuthorizedRequesterIDs: []string{caller.String()}}, Handler: node.EchoHandler()},
		node.Service{Capability: protocol.Capability{Name: "badout", OutputSchema: outSchema}, Handler: node.EchoHandler()},
		node.Service{Capability: protocol.Capability{Name: "fails"}, Handler: node.HandlerFunc(func(context.Context, *node.Call) (json.RawMessage, error) {
			return nil, errors.New("disk on fire")
		})},
	))
	a := meshtest.Node(t, 1)
	meshtest.Connect(t, a, provider)

	tests := []struct {
		name, action, params string
		wantCode             protocol.Code
		wantResult           string
		wantMsg              string
	}{
		{name: "echo", action: "echo", params: `{"text":"hi","n":[1,2]}`, wantResult: `{"n":[1,2],"text":"hi"}`},
		{name: "no params", action: "echo", wantResult: `{}`},
		{name: "schema ok", action: "strict", params: `{"text":"hello"}`, wantResult: `{"text":"hello"}`},
		{name: "schema missing field", action: "strict", params: `{}`, wantCode: protocol.CodeInvalidMessage, wantMsg: "text"},
		{name: "schema wrong type", action: "strict", params: `{"text":5}`, wantCode: protocol.CodeInvalidMessage, wantMsg: "/text"},
		{name: "schema extra field", action: "strict", params: `{"text":"x","y":1}`, wantCode: protocol.CodeInvalidMessage, wantMsg: "y"},
		{name: "unknown capability", action: "nope", wantCode: protocol.CodeCapabilityNotSupported, wantMsg: "nope"},
		{name: "unauthorized", action: "private", params: `{}`, wantCode: protocol.CodeUnauthorized, wantMsg: caller.String()},
		{name: "authorized", action: "mine", params: `{"a":1}`, wantResult: `{"a":1}`},
		{name: "output schema", action: "badout", params: `{"x":1}`, wantCode: protocol.CodeInternalError, wantMsg: "output_schema"},
		{name: "handler error", action: "fails", wantCode: protocol.CodeInternalError, wantMsg: "disk on fire"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := call(t, a, provider, tc.action, tc.params)
			if tc.wantCode != "" {
				pe := wantCode(t, err, tc.wantCode)
				if !strings.Contains(pe.Message, tc.wantMsg) {
					t.Errorf("message %q does not mention %q", pe.Message, tc.wantMsg)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != protocol.StatusSuccess || string(resp.Result) != tc.wantResult {
				t.Fatalf("got %s %s, want success %s", resp.Status, resp.Result, tc.wantResult)
			}
		})
	}

	t.Run("unknown capability lists available", func(t *testing.T) {
		_, err := call(t, a, provider, "translate", `{}`)
		pe := wantCode(t, err, protocol.CodeCapabilityNotSupported)
		var d struct {
			Requested string   `json:"requested"`
			Available []string `json:"available"`
		}
		if err := json.Unmarshal(pe.Details, &d); err != nil {
			t.Fatal(err)
		}
		if d.Requested != "translate" || strings.Join(d.Available, ",") != "badout,echo,fails,mine,private,strict" {
			t.Errorf("details %s", pe.Details)
		}
	})
	t.Run("schema error details", func(t *testing.T) {
		_, err := call(t, a, provider, "strict", `{"text":5}`)
		pe := wantCode(t, err, protocol.CodeInvalidMessage)
		if !strings.Contains(string(pe.Details), "schemaErrors") {
			t.Errorf("details %s", pe.Details)
		}
	})
}

func TestCallTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	slow := node.HandlerFunc(func(ctx context.Context, _ *node.Call) (json.RawMessage, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return json.RawMessage(`{}`), nil
	})
	p := meshtest.Node(t, 2, node.WithServices(node.Service{Capability: protocol.Capability{Name: "slow"}, Handler: slow}))
	a := meshtest.Node(t, 1)
	meshtest.Connect(t, a, p)
	start := time.Now()
	_, err := a.Call(meshtest.Context(t, 20*time.Second), protocol.CallRequest{To: p.AgentID(), Action: "slow", Timeout: 300 * time.Millisecond})
	wantCode(t, err, protocol.CodeTimeout)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("timeout took %s", d)
	}
	// The connection stays usable after a timeout.
	if _, err := a.Call(meshtest.Context(t, 20*time.Second), protocol.CallRequest{To: p.AgentID(), Action: "nope"}); protocol.CodeOf(err) != protocol.CodeCapabilityNotSupported {
		t.Fatalf("after timeout: %v", err)
	}

	// A call that names no timeout gets the node's (WithRequestTimeout),
	// not the 30 s default.
	b := meshtest.Node(t, 3, node.WithRequestTimeout(300*time.Millisecond))
	meshtest.Connect(t, b, p)
	start = time.Now()
	_, err = b.Call(meshtest.Context(t, 20*time.Second), protocol.CallRequest{To: p.AgentID(), Action: "slow"})
	wantCode(t, err, protocol.CodeTimeout)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the node's timeout of 300ms took %s", d)
	}
}

func TestInProgress(t *testing.T) {
	h := node.HandlerFunc(func(ctx context.Context, c *node.Call) (json.RawMessage, error) {
		for i := 1; i <= 3; i++ {
			if err := c.Progress(json.RawMessage(fmt.Sprintf(`{"step":%d}`, i))); err != nil {
				return nil, err
			}
		}
		return json.RawMessage(`{"done":true}`), nil
	})
	p := meshtest.Node(t, 2, node.WithServices(node.Service{Capability: protocol.Capability{Name: "long"}, Handler: h}))
	a := meshtest.Node(t, 1)
	meshtest.Connect(t, a, p)
	var steps []string
	resp, err := a.Call(meshtest.Context(t, 20*time.Second), protocol.CallRequest{
		To: p.AgentID(), Action: "long",
		Progress: func(r *protocol.Response) { steps = append(steps, string(r.Status)+string(r.Result)) },
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `in_progress{"step":1},in_progress{"step":2},in_progress{"step":3}`
	if got := strings.Join(steps, ","); got != want {
		t.Errorf("progress %s, want %s", got, want)
	}
	if string(resp.Result) != `{"done":true}` {
		t.Errorf("result %s", resp.Result)
	}
}

// Concurrent calls on one stream each get their own progress, in order,
// and their own final answer and receipt: with other calls pending, a
// call's goroutine verifies the frames the stream's reader routes to it.
func TestInProgressConcurrent(t *testing.T) {
	h := node.HandlerFunc(func(ctx context.Context, c *node.Call) (json.RawMessage, error) {
		for i := 1; i <= 3; i++ {
			if err := c.Progress(json.RawMessage(fmt.Sprintf(`{"step":%d}`, i))); err != nil {
				return nil, err
			}
		}
		return c.Request.Params, nil
	})
	p := meshtest.Node(t, 2, node.WithServices(node.Service{Capability: protocol.Capability{Name: "long"}, Handler: h}))
	a := meshtest.Node(t, 1)
	meshtest.Connect(t, a, p)
	const n = 32
	errs := make(chan error, n)
	for i := range n {
		go func() {
			var steps []string
			var receipt json.RawMessage
			params := fmt.Sprintf(`{"i":%d}`, i)
			resp, err := a.Call(meshtest.Context(t, 20*time.Second), protocol.CallRequest{
				To: p.AgentID(), Action: "long", Params: json.RawMessage(params),
				Progress: func(r *protocol.Response) { steps = append(steps, string(r.Result)) },
				Signed:   func(sj json.RawMessage) { receipt = sj },
			})
			switch {
			case err != nil:
			case string(resp.Result) != params:
				err = fmt.Errorf("call %d got %s", i, resp.Result)
			case strings.Join(steps, ",") != `{"step":1},{"step":2},{"step":3}`:
				err = fmt.Errorf("call %d progress %v", i, steps)
			case !strings.Contains(string(receipt), params):
				err = fmt.Errorf("call %d receipt %s", i, receipt)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

func TestRateLimited(t *testing.T) {
	lim := node.DefaultLimits()
	lim.RequestsPerSecond, lim.Burst = 0.001, 3
	p := meshtest.Node(t, 2, node.WithServices(echoService("echo")), node.WithLimits(lim))
	a := meshtest.Node(t, 1)
	meshtest.Connect(t, a, p)
	for i := range 3 {
		if _, err := call(t, a, p, "echo", `{}`); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	_, err := call(t, a, p, "echo", `{}`)
	wantCode(t, err, protocol.CodeRateLimited)
	// Another requester has its own bucket.
	b := meshtest.Node(t, 3)
	meshtest.Connect(t, b, p)
	if _, err := call(t, b, p, "echo", `{}`); err != nil {
		t.Fatalf("other requester: %v", err)
	}
}

func TestRequestSizeLimit(t *testing.T) {
	lim := node.DefaultLimits()
	lim.MaxRequestBytes = 4096
	p := meshtest.Node(t, 2, node.WithServices(echoService("echo")), node.WithLimits(lim))
	a := meshtest.Node(t, 1)
	meshtest.Connect(t, a, p)
	big := fmt.Sprintf(`{"blob":%q}`, strings.Repeat("x", 8192))
	_, err := call(t, a, p, "echo", big)
	pe := wantCode(t, err, protocol.CodeRateLimited)
	if !strings.Contains(pe.Message, "4096") {
		t.Errorf("message %q does not name the limit", pe.Message)
	}
	if _, err := call(t, a, p, "echo", `{"small":true}`); err != nil {
		t.Fatalf("small request after a big one: %v", err)
	}
}

func TestConcurrentCalls(t *testing.T) {
	var running atomic.Int32
	p := meshtest.Node(t, 2, node.WithServices(echoService("echo")))
	a := meshtest.Node(t, 1)
	meshtest.Connect(t, a, p)
	const n = 200
	errs := make(chan error, n)
	for i := range n {
		go func() {
			running.Add(1)
			params := fmt.Sprintf(`{"i":%d}`, i)
			resp, err := call(t, a, p, "echo", params)
			if err == nil && string(resp.Result) != params {
				err = fmt.Errorf("call %d got %s", i, resp.Result)
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// TestCallValuesOutliveFrames checks that what a call decodes does not
// share a buffer that is read into again: the results a caller keeps and
// the params a handler keeps stay as they were while later frames of the
// same length, one call at a time and concurrently, pass through the same
// streams.
func TestCallValuesOutliveFrames(t *testing.T) {
	var (
		mu   sync.Mutex
		kept = map[string]json.RawMessage{} // params by their "i", as the handler got them
	)
	keep := node.HandlerFunc(func(_ context.Context, c *node.Call) (json.RawMessage, error) {
		var p struct {
			I string `json:"i"`
		}
		if err := json.Unmarshal(c.Request.Params, &p); err != nil {
			return nil, err
		}
		mu.Lock()
		kept[p.I] = c.Request.Params
		mu.Unlock()
		return c.Request.Params, nil
	})
	p := meshtest.Node(t, 2, node.WithServices(node.Service{Capability: protocol.Capability{Name: "keep"}, Handler: keep}))
	a := meshtest.Node(t, 1)
	meshtest.Connect(t, a, p)
	params := func(i int) string { return fmt.Sprintf(`{"i":"%04d","pad":%q}`, i, strings.Repeat("x", 200)) }

	for _, tc := range []struct {
		name     string
		from, to int
		parallel bool
	}{
		{"serial", 0, 50, false},
		{"concurrent", 50, 250, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			results := make([]json.RawMessage, tc.to)
			errs := make(chan error, tc.to-tc.from)
			do := func(i int) {
				resp, err := call(t, a, p, "keep", params(i))
				if err == nil {
					results[i] = resp.Result
				}
				errs <- err
			}
			for i := tc.from; i < tc.to; i++ {
				if tc.parallel {
					go do(i)
				} else {
					do(i)
				}
			}
			for range tc.to - tc.from {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			for i := tc.from; i < tc.to; i++ {
				want := params(i)
				if string(results[i]) != want {
					t.Errorf("result of call %d became %s", i, results[i])
				}
				mu.Lock()
				got := kept[fmt.Sprintf("%04d", i)]
				mu.Unlock()
				if string(got) != want {
					t.Errorf("params the handler kept of call %d became %s", i, got)
				}
			}
		})
	}
}

// TestSpareWorkers checks that each request stream keeps one spare worker
// between requests, however many it served, and that it goes with its
// stream.
func TestSpareWorkers(t *testing.T) {
	p := meshtest.Node(t, 2, node.WithServices(echoService("echo")))
	a, b := meshtest.Node(t, 1), meshtest.Node(t, 3)
	meshtest.Connect(t, a, p)
	meshtest.Connect(t, b, p)
	spares := func(want int) {
		t.Helper()
		wait.ForTrue(t, 10*time.Second, fmt.Sprintf("%d spare workers", want), func() bool { return node.SpareWorkers(p) == want })
	}
	for _, from := range []*node.Node{a, a, a, b, b} {
		if _, err := call(t, from, p, "echo", `{"x":1}`); err != nil {
			t.Fatal(err)
		}
	}
	spares(2)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	spares(1)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	spares(0)
}

func TestCallSelf(t *testing.T) {
	a := meshtest.Node(t, 1, node.WithServices(echoService("echo")))
	resp, err := call(t, a, a, "echo", `{"x":1}`)
	if err != nil || string(resp.Result) != `{"x":1}` {
		t.Fatalf("%v %v", resp, err)
	}
}

func TestCallUnknownAgent(t *testing.T) {
	a := meshtest.Node(t, 1)
	_, err := a.Call(meshtest.Context(t, 10*time.Second), protocol.CallRequest{To: meshtest.ID(t, 9).String(), Action: "echo"})
	wantCode(t, err, protocol.CodeUnknownAgent)
	_, err = a.Call(meshtest.Context(t, 10*time.Second), protocol.CallRequest{To: "not-an-id", Action: "echo"})
	wantCode(t, err, protocol.CodeInvalidMessage)
}

func TestCloseFailsPendingCalls(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	started := make(chan struct{}, 1)
	h := node.HandlerFunc(func(ctx context.Context, _ *node.Call) (json.RawMessage, error) {
		started <- struct{}{}
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil, ctx.Err()
	})
	p := meshtest.Node(t, 2, node.WithServices(node.Service{Capability: protocol.Capability{Name: "block"}, Handler: h}))
	a := meshtest.Node(t, 1)
	meshtest.Connect(t, a, p)
	done := make(chan error, 1)
	go func() {
		_, err := a.Call(context.Background(), protocol.CallRequest{To: p.AgentID(), Action: "block", Timeout: time.Minute})
		done <- err
	}()
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler never started")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("call succeeded after close")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pending call not released by Close")
	}
}

// TestOfferBySource: a source's services come and go without touching the
// node's own, and peers see each change in a fresh hello.
func TestOfferBySource(t *testing.T) {
	a := meshtest.Node(t, 1)
	b := meshtest.Node(t, 2, node.WithServices(echoService("own")))
	meshtest.Connect(t, a, b)
	sees := func(want string) {
		t.Helper()
		wait.For(t, 10*time.Second, func() error {
			caps, _ := a.PeerCapabilities(b.ID())
			if got := names(caps); got != want {
				return fmt.Errorf("a sees %q, want %q", got, want)
			}
			return nil
		})
	}
	if err := b.Offer("api", []node.Service{echoService("served")}); err != nil {
		t.Fatal(err)
	}
	sees("own,served")
	if err := b.SetServices([]node.Service{echoService("own2")}); err != nil {
		t.Fatal(err)
	}
	sees("own2,served")
	if err := b.Offer("lobby", []node.Service{echoService("served")}); !errors.Is(err, node.ErrCapabilityTaken) {
		t.Errorf("offering another source's name: %v, want ErrCapabilityTaken", err)
	}
	if err := b.Offer("", nil); err == nil {
		t.Error("Offer with no source name succeeded")
	}
	if err := b.Offer("api", nil); err != nil {
		t.Fatal(err)
	}
	sees("own2")
}
