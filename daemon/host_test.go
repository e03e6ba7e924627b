package daemon

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/store"
)

// TestLocalPagesRefuseForeignHost (issue 23 defect 7): the local API's
// HTTP pages (/metrics, /healthz, /readyz, /ui, seed 003's /docs and
// /agent/*) answer only a Host that is an IP address or localhost; a
// DNS-rebinding page's request, which names the attacker's domain, is
// refused with 421 and gets none of the page.
func TestLocalPagesRefuseForeignHost(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), StoreFileName), store.WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	n := meshtest.Node(t, 62, node.WithStore(st))
	api := startTest(t, WithNode(n), WithStore(st)).APIAddr()
	_, port, _ := strings.Cut(api, ":")
	get := func(path, host string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, "http://"+api+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, string(body)
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz", "/ui", "/ui/", "/docs", "/agent/capabilities"} {
		for _, tc := range []struct {
			host string
			ok   bool
		}{
			{"127.0.0.1:" + port, true},
			{"localhost:" + port, true},
			{"LOCALHOST.:" + port, true},
			{"[::1]:" + port, true},
			{"evil.example:" + port, false},
			{"evil.example", false},
			{"localhost.evil.example:" + port, false},
			{"127.0.0.1.nip.io:" + port, false},
		} {
			code, body := get(path, tc.host)
			switch {
			case tc.ok && code == http.StatusMisdirectedRequest:
				t.Errorf("GET %s Host %s: refused (%d %q)", path, tc.host, code, body)
			case !tc.ok && code != http.StatusMisdirectedRequest:
				t.Errorf("GET %s Host %s: %d, want 421", path, tc.host, code)
			case !tc.ok && strings.Contains(body, "meshagent_"):
				t.Errorf("GET %s Host %s: the body names metrics", path, tc.host)
			}
		}
	}
	if code, body := get("/metrics", "127.0.0.1:"+port); code != http.StatusOK || !strings.Contains(body, "meshagent_") {
		t.Errorf("GET /metrics on 127.0.0.1: %d %.200q", code, body)
	}
	// Seed 003's REST is mounted: its document always, its endpoints off
	// (404 naming the flag) without --agent-tokens.
	if code, body := get("/docs", "127.0.0.1:"+port); code != http.StatusOK || !strings.Contains(body, `"/agent/request"`) {
		t.Errorf("GET /docs on 127.0.0.1: %d %.200q", code, body)
	}
	if code, body := get("/agent/capabilities", "127.0.0.1:"+port); code != http.StatusNotFound || !strings.Contains(body, "--agent-tokens") {
		t.Errorf("GET /agent/capabilities without tokens: %d %.200q", code, body)
	}
}

// TestMaxClientsReported: the bus server's connection cap is
// --max-clients (default rpc.DefaultMaxClients) and /metrics reports it.
func TestMaxClientsReported(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), StoreFileName), store.WithPruneInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	n := meshtest.Node(t, 63, node.WithStore(st))
	d := startTest(t, WithNode(n), WithStore(st), WithPublic(Public{MaxClients: 7000}))
	if got := d.api.srv.MaxClients(); got != 7000 {
		t.Errorf("MaxClients = %d, want 7000", got)
	}
	resp, err := http.Get("http://" + d.api.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "\nmeshagent_bus_max_clients 7000\n") {
		t.Errorf("/metrics does not report meshagent_bus_max_clients 7000")
	}
	if def := (Public{}).limits().MaxClients; def < 5000 {
		t.Errorf("the default cap is %d", def)
	}
}

// startTest starts a daemon with a local API on a free loopback port and
// opts until the test ends.
func startTest(t *testing.T, opts ...Option) *Daemon {
	t.Helper()
	d, err := Start(t.Context(), append([]Option{WithLogger(testlog.New(t)), WithAPI("127.0.0.1:0")}, opts...)...)
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
