package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshagent/meshagent/dht"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
)

// anyProvider is one of several agents serving "work" (not idempotent)
// and "lookup" (idempotent). A request with {"block": true} blocks its
// handler, after announcing itself on entered, until the node stops it;
// {"blockOnce": true} does so only for the first run among the providers.
type anyProvider struct {
	n       *node.Node
	runs    sync.Map // capability -> *atomic.Int64
	entered chan peer.ID
	blocked *atomic.Bool // shared: a blockOnce run has blocked
}

func (p *anyProvider) ran(capability string) int64 {
	v, _ := p.runs.LoadOrStore(capability, new(atomic.Int64))
	return v.(*atomic.Int64).Load()
}

func (p *anyProvider) services() []node.Service {
	h := node.HandlerFunc(func(ctx context.Context, c *node.Call) (json.RawMessage, error) {
		v, _ := p.runs.LoadOrStore(c.Request.Action, new(atomic.Int64))
		v.(*atomic.Int64).Add(1)
		var params struct{ Block, BlockOnce bool }
		_ = json.Unmarshal(c.Request.Params, &params)
		if params.Block || (params.BlockOnce && p.blocked.CompareAndSwap(false, true)) {
			p.entered <- p.n.ID()
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return json.RawMessage(fmt.Sprintf(`{"by":%q}`, p.n.AgentID())), nil
	})
	return []node.Service{
		{Capability: protocol.Capability{Name: "work"}, Handler: h},
		{Capability: protocol.Capability{Name: "lookup", Idempotent: true}, Handler: h},
	}
}

// anyMesh starts a caller connected to k providers, the first with opts.
func anyMesh(t *testing.T, k int, opts ...node.Option) (*node.Node, []*anyProvider) {
	t.Helper()
	caller := meshtest.Node(t, 0)
	entered := make(chan peer.ID, 16)
	blocked := new(atomic.Bool)
	var provs []*anyProvider
	for i := range k {
		p := &anyProvider{entered: entered, blocked: blocked}
		o := []node.Option{node.WithServices(p.services()...)}
		if i == 0 {
			o = append(o, opts...)
		}
		p.n = meshtest.Node(t, i+1, o...)
		meshtest.Connect(t, caller, p.n)
		// Loopback round trips are noise, and one hello on a loaded
		// machine can take several times another's: make the providers
		// equally near, so that the spread shows the choice.
		for range 100 {
			caller.Host().Peerstore().RecordLatency(p.n.ID(), time.Millisecond)
		}
		provs = append(provs, p)
	}
	return caller, provs
}

// kill cuts a provider off as SIGKILL would: its connections go, and no
// answer leaves it.
func kill(t *testing.T, p *anyProvider) {
	t.Helper()
	if err := p.n.Host().Close(); err != nil {
		t.Fatal(err)
	}
}

func callAny(t *testing.T, caller *node.Node, capability, params string) (*protocol.Response, string, error) {
	t.Helper()
	return caller.CallAny(meshtest.Context(t, 20*time.Second), protocol.CallRequest{
		Action: capability, Params: json.RawMessage(params), Timeout: 10 * time.Second,
	})
}

func TestCallAnySpreadsAndFailsOver(t *testing.T) {
	caller, provs := anyMesh(t, 3)
	const calls = 90
	for i := range calls {
		resp, agent, err := callAny(t, caller, "work", `{}`)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		var res struct{ By string }
		if err := json.Unmarshal(resp.Result, &res); err != nil || res.By != agent {
			t.Fatalf("call %d: answered by %q, reported %q (%v)", i, res.By, agent, err)
		}
	}
	spread := make([]int64, len(provs))
	for i, p := range provs {
		spread[i] = p.ran("work")
		if spread[i] < calls/10 {
			t.Errorf("provider %d ran %d of %d calls", i, spread[i], calls)
		}
	}
	t.Logf("spread of %d calls over 3 providers: %v", calls, spread)

	kill(t, provs[0])
	// A call that wrote its request before the caller saw the connection
	// go may have reached the provider, and is not sent elsewhere (see
	// TestCallAnyNotIdempotentRunsOnce): "later" calls start once it has.
	wait.For(t, 10*time.Second, func() error {
		if caller.Host().Network().Connectedness(provs[0].n.ID()) == network.Connected {
			return errors.New("the caller is still connected to the dead provider")
		}
		return nil
	})
	before := provs[0].ran("work")
	for i := range 30 {
		if _, agent, err := callAny(t, caller, "work", `{}`); err != nil {
			t.Fatalf("call %d after a provider died: %v", i, err)
		} else if agent == provs[0].n.AgentID() {
			t.Fatalf("call %d answered by the dead provider", i)
		}
	}
	if got := provs[0].ran("work"); got != before {
		t.Fatalf("the dead provider ran %d more", got-before)
	}
}

// TestCallAnyFailsOverWhenNotStarted: a provider that refuses a
// request before its handler (here: its rate limit) is skipped, even for
// a request that is not idempotent.
func TestCallAnyFailsOverWhenNotStarted(t *testing.T) {
	lim := node.DefaultLimits()
	lim.RequestsPerSecond, lim.Burst = 0.001, 1 // one request, then RATE_LIMITED
	caller, provs := anyMesh(t, 2, node.WithLimits(lim))
	const calls = 20
	for i := range calls {
		if _, _, err := callAny(t, caller, "work", `{}`); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if a, b := provs[0].ran("work"), provs[1].ran("work"); a > 1 || a+b != calls {
		t.Fatalf("the rate-limited provider ran %d, the other %d, of %d", a, b, calls)
	}
}

func TestCallAnyNotIdempotentRunsOnce(t *testing.T) {
	caller, provs := anyMesh(t, 3)
	errc := make(chan error, 1)
	go func() {
		_, _, err := callAny(t, caller, "work", `{"block":true}`)
		errc <- err
	}()
	victim := <-provs[0].entered
	for _, p := range provs {
		if p.n.ID() == victim {
			kill(t, p)
		}
	}
	err := <-errc
	if protocol.CodeOf(err) != protocol.CodeUnknownAgent {
		t.Fatalf("a request lost in flight returned %v, want UNKNOWN_AGENT", err)
	}
	var total int64
	for _, p := range provs {
		total += p.ran("work")
	}
	if total != 1 {
		t.Fatalf("the request ran %d times, want once", total)
	}
}

func TestCallAnyIdempotentRunsAgain(t *testing.T) {
	caller, provs := anyMesh(t, 3)
	type result struct {
		agent string
		err   error
	}
	done := make(chan result, 1)
	go func() {
		_, agent, err := callAny(t, caller, "lookup", `{"blockOnce":true}`)
		done <- result{agent, err}
	}()
	victim := <-provs[0].entered
	for _, p := range provs {
		if p.n.ID() == victim {
			kill(t, p)
		}
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("an idempotent request lost in flight: %v", r.err)
	}
	if r.agent == victim.String() {
		t.Fatalf("answered by the killed provider")
	}
	var total int64
	for _, p := range provs {
		total += p.ran("lookup")
	}
	if total != 2 {
		t.Fatalf("the request ran %d times, want twice (once lost)", total)
	}
}

func TestCallAnyNoProvider(t *testing.T) {
	caller, _ := anyMesh(t, 1)
	_, _, err := callAny(t, caller, "nobody-serves-this", `{}`)
	if protocol.CodeOf(err) != protocol.CodeCapabilityNotSupported {
		t.Fatalf("got %v, want CAPABILITY_NOT_SUPPORTED", err)
	}
	_, _, err = caller.CallAny(t.Context(), protocol.CallRequest{To: caller.AgentID(), Action: "work"})
	if protocol.CodeOf(err) != protocol.CodeInvalidMessage {
		t.Fatalf("CallAny with a target: %v, want INVALID_MESSAGE", err)
	}
}

// TestCallAnySkipsUnauthorized: a provider whose signed ACL leaves the
// caller out is not tried.
func TestCallAnySkipsUnauthorized(t *testing.T) {
	caller := meshtest.Node(t, 0)
	closed := meshtest.Node(t, 1, node.WithServices(node.Service{
		Capability: protocol.Capability{Name: "work", AuthorizedRequesterIDs: []string{meshtest.ID(t, 9).String()}},
		Handler:    node.EchoHandler(),
	}))
	open := meshtest.Node(t, 2, node.WithServices(echoService("work")))
	meshtest.Connect(t, caller, closed)
	meshtest.Connect(t, caller, open)
	for i := range 10 {
		_, agent, err := callAny(t, caller, "work", `{}`)
		if err != nil || agent != open.AgentID() {
			t.Fatalf("call %d: %s, %v", i, agent, err)
		}
	}
}

// TestCallAnyFindsProvidersInTheDirectory: with no connected provider,
// CallAny asks the DHT, and the providers it confirms answer.
func TestCallAnyFindsProvidersInTheDirectory(t *testing.T) {
	dhtOpts := node.WithDHTOptions(dht.WithProviderTTL(time.Minute), dht.WithReprovideInterval(time.Second))
	var nodes []*node.Node
	for i := range 4 {
		opts := []node.Option{node.WithDHT(true), dhtOpts}
		if i > 0 {
			opts = append(opts, node.WithBootstrap(nodes[i-1].Addrs()...))
		}
		if i == 0 || i == 1 {
			opts = append(opts, node.WithServices(echoService("translate")))
		}
		nodes = append(nodes, meshtest.Node(t, 20+i, opts...))
	}
	caller := nodes[3]
	// The DHT may have connected the caller to the providers already:
	// cut those connections, so that they are found through the
	// directory (which dials them again) rather than the hello cache.
	for _, p := range nodes[:2] {
		_ = caller.Host().Network().ClosePeer(p.ID())
	}
	answered := map[string]bool{}
	wait.For(t, 60*time.Second, func() error {
		_, agent, err := callAny(t, caller, "translate", `{}`)
		if err != nil {
			return err
		}
		answered[agent] = true
		if !answered[nodes[0].AgentID()] || !answered[nodes[1].AgentID()] {
			return fmt.Errorf("answered by %v so far", answered)
		}
		return nil
	})
	if len(answered) != 2 {
		t.Fatalf("answered by %v", answered)
	}
}
