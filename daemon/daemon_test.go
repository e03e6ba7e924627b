package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/meshtest"
	"github.com/meshagent/meshagent/internal/testlog"
	"github.com/meshagent/meshagent/internal/wait"
	"github.com/meshagent/meshagent/node"
	"github.com/meshagent/meshagent/rpc"
	"github.com/meshagent/meshagent/store"
)

// ownOptions build a daemon that owns its node (key i, loopback, no mDNS
// or DHT) and its store under dir, with the capabilities file caps.
func ownOptions(t *testing.T, i int, dir, caps string) []Option {
	t.Helper()
	services, err := node.LoadServices(caps)
	if err != nil {
		t.Fatal(err)
	}
	return []Option{WithLogger(testlog.New(t)), func(c *Config) error {
		c.NodeOptions = []node.Option{node.WithIdentity(meshtest.Key(t, i)), node.WithListenAddrs(meshtest.Loopback),
			node.WithMDNS(false), node.WithDHT(false)}
		c.DataDir, c.CapabilitiesFile, c.Services = dir, caps, services
		return nil
	}}
}

func writeCaps(t *testing.T, path string, names ...string) {
	t.Helper()
	s := "["
	for i, n := range names {
		if i > 0 {
			s += ","
		}
		s += `{"name":"` + n + `","description":"returns its params","handler":{"builtin":"echo"}}`
	}
	if err := os.WriteFile(path, []byte(s+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
}

func capNames(n *node.Node) []string {
	var out []string
	for _, c := range n.Capabilities() {
		out = append(out, c.Name)
	}
	return out
}

// TestCloseStopsWhatStartBuilt: a daemon that built its node and store
// serves the local API, a relay's public listener and the metrics
// listener once Start returns, and
// after Close (twice: the second waits for the first) no listener
// answers and the store's file lock is free (another process could open
// it).
func TestCloseStopsWhatStartBuilt(t *testing.T) {
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	writeCaps(t, caps, "echo")
	d, err := Start(t.Context(), append(ownOptions(t, 301, dir, caps), WithAPI("127.0.0.1:0"), WithPublic(Public{Addr: "127.0.0.1:0"}),
		func(c *Config) error { c.MetricsAddr = "127.0.0.1:0"; return nil })...)
	if err != nil {
		t.Fatal(err)
	}
	if got := capNames(d.Node()); len(got) != 1 || got[0] != "echo" {
		t.Fatalf("capabilities %v, want [echo]", got)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, d.APIAddr())
	if err != nil {
		t.Fatal(err)
	}
	_ = cl.Close()
	if cl, err = rpc.Dial(ctx, "ws://"+d.PublicAddr()+"/"); err != nil {
		t.Fatal(err)
	}
	_ = cl.Close()
	readyz := "http://" + d.ops.addr + "/readyz"
	resp, err := http.Get(readyz)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /readyz: %s", resp.Status)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(ctx); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if _, err := rpc.Dial(ctx, d.APIAddr()); err == nil {
		t.Error("the local API still answers after Close")
	}
	if _, err := rpc.Dial(ctx, "ws://"+d.PublicAddr()+"/"); err == nil {
		t.Error("the public listener still answers after Close")
	}
	if resp, err := http.Get(readyz); err == nil {
		_ = resp.Body.Close()
		t.Error("the metrics listener still answers after Close")
	}
	st, err := store.Open(filepath.Join(dir, StoreFileName), store.WithOpenTimeout(time.Second))
	if err != nil {
		t.Fatalf("the store is still held after Close: %v", err)
	}
	_ = st.Close()
}

// TestStartFailsCleanly: a listener that cannot bind is a *ListenError
// naming it, and what Start had built by then is stopped again (the
// store's lock is free).
func TestStartFailsCleanly(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	caps := filepath.Join(dir, "caps.json")
	writeCaps(t, caps, "echo")
	_, err = Start(t.Context(), append(ownOptions(t, 302, dir, caps), WithAPI("127.0.0.1:0"), func(c *Config) error { c.MetricsAddr = taken.Addr().String(); return nil })...)
	le, ok := errors.AsType[*ListenError](err)
	if !ok || le.Listener != ListenerMetrics || le.Addr != taken.Addr().String() {
		t.Fatalf("Start: %v, want a ListenError for the metrics listener", err)
	}
	st, err := store.Open(filepath.Join(dir, StoreFileName), store.WithOpenTimeout(time.Second))
	if err != nil {
		t.Fatalf("the store is still held after a failed Start: %v", err)
	}
	_ = st.Close()
}

// TestReload: Reload reads the capabilities file again at once, and a
// file that does not load leaves the current set; with a poll the daemon
// notices a changed file by itself.
func TestReload(t *testing.T) {
	start := func(t *testing.T, i int, poll time.Duration) (*Daemon, string) {
		dir := t.TempDir()
		caps := filepath.Join(dir, "caps.json")
		writeCaps(t, caps, "echo")
		d, err := Start(t.Context(), append(ownOptions(t, i, dir, caps), func(c *Config) error { c.Poll = poll; return nil })...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close(context.Background()) })
		return d, caps
	}
	t.Run("Reload", func(t *testing.T) {
		d, caps := start(t, 303, 0)
		for _, tc := range []struct {
			name  string
			write func()
			want  []string
		}{
			{"changed", func() { writeCaps(t, caps, "echo", "shout") }, []string{"echo", "shout"}},
			{"broken", func() { _ = os.WriteFile(caps, []byte(`[{"name":`), 0o600) }, []string{"echo", "shout"}},
			{"changed again", func() { writeCaps(t, caps, "one") }, []string{"one"}},
		} {
			tc.write()
			if !d.Reload() {
				t.Fatal("Reload reported no settings file")
			}
			if got := capNames(d.Node()); !slices.Equal(got, tc.want) {
				t.Errorf("%s: capabilities %v, want %v", tc.name, got, tc.want)
			}
		}
	})
	t.Run("poll", func(t *testing.T) {
		d, caps := start(t, 304, 20*time.Millisecond)
		writeCaps(t, caps, "echo", "shout")
		wait.For(t, 10*time.Second, func() error {
			if got := capNames(d.Node()); len(got) != 2 {
				return fmt.Errorf("capabilities %v, want the file's two", got)
			}
			return nil
		})
	})
}
