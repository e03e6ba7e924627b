package cli

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/daemon"
	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/protocol"
	"github.com/meshagent/meshagent/store"
)

// serveAPI serves n's local API on a free loopback port for the test.
func serveAPI(t *testing.T, n *node.Node) string {
	t.Helper()
	return serveStoreAPI(t, n, nil)
}

// openTestStore opens a store at path, closed when the test ends.
func openTestStore(t *testing.T, path string) *store.Store {
	t.Helper()
	st, err := store.Open(path, store.WithPruneInterval(0), store.WithLogger(testlog.New(t)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// serveStoreAPI is serveAPI with the node's store, which the bus keeps
// its history and outbox in.
func serveStoreAPI(t *testing.T, n *node.Node, st *store.Store) string {
	t.Helper()
	return startDaemon(t, daemon.WithNode(n), daemon.WithStore(st)).APIAddr()
}

// startDaemon serves a local API on a free loopback port with opts (a
// node among them) until the test ends.
func startDaemon(t *testing.T, opts ...daemon.Option) *daemon.Daemon {
	t.Helper()
	d, err := daemon.Start(t.Context(), append([]daemon.Option{daemon.WithLogger(testlog.New(t)), daemon.WithAPI("127.0.0.1:0")}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := d.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return d
}

func handler(f func(ctx context.Context, call *node.Call) (json.RawMessage, error)) node.Handler {
	return node.HandlerFunc(f)
}

// TestCallErrorCodes drives `meshagent call` through a node's local API to
// a provider that answers with each AgentProtocol error, and checks the
// exit status and message of each.
func TestCallErrorCodes(t *testing.T) {
	caller := meshtest.ID(t, 1)
	services := []node.Service{
		{Capability: protocol.Capability{Name: "steps"}, Handler: handler(func(_ context.Context, call *node.Call) (json.RawMessage, error) {
			for _, p := range []string{`{"step":1}`, `{"step":2}`} {
				if err := call.Progress(json.RawMessage(p)); err != nil {
					return nil, err
				}
			}
			return json.RawMessage(`{"done":true}`), nil
		})},
		{Capability: protocol.Capability{Name: "strict", InputSchema: json.RawMessage(`{"type":"object","required":["text"]}`)}, Handler: node.EchoHandler()},
		{Capability: protocol.Capability{Name: "slow"}, Handler: handler(func(ctx context.Context, _ *node.Call) (json.RawMessage, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})},
		{Capability: protocol.Capability{Name: "broken"}, Handler: handler(func(context.Context, *node.Call) (json.RawMessage, error) {
			return nil, errors.New("disk full")
		})},
		{Capability: protocol.Capability{Name: "private", AuthorizedRequesterIDs: []string{meshtest.ID(t, 9).String()}}, Handler: node.EchoHandler()},
	}
	limits := node.DefaultLimits()
	provider := meshtest.Node(t, 0, node.WithServices(services...))
	limited := meshtest.Node(t, 2, node.WithServices(node.Service{Capability: protocol.Capability{Name: "echo"}, Handler: node.EchoHandler()}),
		node.WithLimits(func() node.Limits { l := limits; l.RequestsPerSecond, l.Burst = 0.001, 1; return l }()))
	n := meshtest.Node(t, 1)
	meshtest.Connect(t, n, provider)
	meshtest.Connect(t, n, limited)
	api := serveAPI(t, n)
	if n.ID() != caller {
		t.Fatal("unexpected caller id")
	}
	to := provider.AgentID()

	t.Run("progress as JSON lines", func(t *testing.T) {
		res := runCLI(t, "", "call", to, "steps", "--api", api, "--json")
		res.wantCode(t, ExitOK)
		lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
		if len(lines) != 3 {
			t.Fatalf("want 3 lines, got:\n%s", res.stdout)
		}
		for i, want := range []struct{ status, result string }{
			{"in_progress", `{"step":1}`}, {"in_progress", `{"step":2}`}, {"success", `{"done":true}`},
		} {
			var r protocol.Response
			if err := json.Unmarshal([]byte(lines[i]), &r); err != nil {
				t.Fatal(err)
			}
			if string(r.Status) != want.status || string(r.Result) != want.result {
				t.Errorf("line %d = %s, want status %s result %s", i, lines[i], want.status, want.result)
			}
		}
	})
	t.Run("progress for people", func(t *testing.T) {
		res := runCLI(t, "", "call", to, "steps", "--api", api)
		res.wantCode(t, ExitOK)
		res.wantStderr(t, `in progress: {"step":1}`, `in progress: {"step":2}`)
		if res.stdout != "{\n  \"done\": true\n}\n" {
			t.Errorf("stdout %q", res.stdout)
		}
	})

	for _, tc := range []struct {
		name string
		to   string
		args []string
		code protocol.Code
		msg  string
	}{
		{"schema", to, []string{"strict", "--params", `{"txt":"x"}`}, protocol.CodeInvalidMessage, "malformed"},
		{"unknown agent", meshtest.ID(t, 7).String(), []string{"echo", "--timeout", "2s"}, protocol.CodeUnknownAgent, "not known to"},
		{"no such capability", to, []string{"nope"}, protocol.CodeCapabilityNotSupported, "it offers: broken, private, slow, steps, strict"},
		{"timeout", to, []string{"slow", "--timeout", "300ms"}, protocol.CodeTimeout, "raise --timeout"},
		{"handler failed", to, []string{"broken"}, protocol.CodeInternalError, "failed on the agent"},
		{"not authorized", to, []string{"private"}, protocol.CodeUnauthorized, "authorized_requester_ids"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := runCLI(t, "", append([]string{"call", tc.to}, append(tc.args, "--api", api, "--json")...)...)
			res.wantCode(t, ExitCodeFor(tc.code))
			res.wantStderr(t, "call: "+string(tc.code)+": ", tc.msg)
			var pe protocol.Error
			if err := json.Unmarshal([]byte(res.stdout), &pe); err != nil || pe.Code != tc.code {
				t.Errorf("--json error line %q (%v), want code %s", res.stdout, err, tc.code)
			}
		})
	}

	t.Run("rate limited", func(t *testing.T) {
		// The burst of one allows one call; the next is refused.
		var last result
		for range 3 {
			if last = runCLI(t, "", "call", limited.AgentID(), "echo", "--api", api); last.code != ExitOK {
				break
			}
		}
		last.wantCode(t, ExitCodeFor(protocol.CodeRateLimited))
		last.wantStderr(t, "RATE_LIMITED", "retry later")
	})
}
