package cli

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshagent/meshagent/internal/wait"
	ma "github.com/multiformats/go-multiaddr"
)

// freePort returns a TCP port free on 127.0.0.1 when called.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func TestDefaultListen(t *testing.T) {
	t.Run("port free", func(t *testing.T) {
		port := freePort(t)
		var logs bytes.Buffer
		got := defaultListen("127.0.0.1", port, slog.New(slog.NewTextHandler(&logs, nil)))
		want := []string{"/ip4/127.0.0.1/tcp/" + itoa(port), "/ip4/127.0.0.1/udp/" + itoa(port) + "/quic-v1"}
		if strings.Join(multiaddrStrings(got), " ") != strings.Join(want, " ") {
			t.Errorf("addrs %v, want %v", got, want)
		}
		if logs.Len() != 0 {
			t.Errorf("logged %q", logs.String())
		}
	})
	for _, proto := range []string{"tcp", "udp"} {
		t.Run(proto+" port taken", func(t *testing.T) {
			port := freePort(t)
			addr := "127.0.0.1:" + itoa(port)
			var closer io.Closer
			var err error
			if proto == "tcp" {
				closer, err = net.Listen("tcp4", addr)
			} else {
				closer, err = net.ListenPacket("udp4", addr)
			}
			if err != nil {
				t.Skipf("cannot hold %s %s: %v", proto, addr, err)
			}
			defer closer.Close()
			var logs bytes.Buffer
			got := defaultListen("127.0.0.1", port, slog.New(slog.NewTextHandler(&logs, nil)))
			want := "/ip4/127.0.0.1/tcp/0 /ip4/127.0.0.1/udp/0/quic-v1"
			if s := strings.Join(multiaddrStrings(got), " "); s != want {
				t.Errorf("addrs %s, want random ports %s", s, want)
			}
			if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "port "+itoa(port)+" is taken") ||
				!strings.Contains(logs.String(), "pass --listen") {
				t.Errorf("warning %q", logs.String())
			}
		})
	}
}

func TestNextSteps(t *testing.T) {
	id := "12D3KooWARQ5NFim5LHmaZbpLJXX4ksRtnaZsmP6MLDvP7hZfGEC"
	addrs := []ma.Multiaddr{
		ma.StringCast("/ip4/127.0.0.1/tcp/4001/p2p/" + id),
		ma.StringCast("/ip4/127.0.0.1/udp/4001/quic-v1/p2p/" + id),
		ma.StringCast("/ip4/192.0.2.7/tcp/4001/p2p/" + id),
	}
	var out bytes.Buffer
	if err := writeNextSteps(&out, addrs, "127.0.0.1:7893"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"meshagent node --bootstrap /ip4/192.0.2.7/tcp/4001/p2p/" + id,
		`meshagent node --data "$(mktemp -d)" --api 127.0.0.1:0 --bootstrap /ip4/127.0.0.1/tcp/4001/p2p/` + id,
		"meshagent status --api 127.0.0.1:7893",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("next steps lack %q:\n%s", want, out.String())
		}
	}
}

// The next steps follow the start line only on a terminal.
func TestNodeNextStepsOnTerminal(t *testing.T) {
	for _, terminal := range []bool{false, true} {
		var out, errb syncBuffer
		app, r := newApp(&out, &errb)
		r.terminal = func(io.Writer) bool { return terminal }
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, app, []string{"meshagent", "node", "--data", t.TempDir(), "--listen", "/ip4/127.0.0.1/tcp/0",
				"--api", "127.0.0.1:0", "--no-mdns"})
		}()
		wait.For(t, 20*time.Second, func() error {
			if !strings.Contains(out.String(), "\n") {
				return io.ErrNoProgress
			}
			return nil
		})
		cancel()
		if code := <-done; code != ExitOK {
			t.Fatalf("exit %d:\n%s", code, errb.String())
		}
		if got := strings.Contains(out.String(), "Next steps:\n") && strings.Contains(out.String(), "--bootstrap /ip4/127.0.0.1/tcp/"); got != terminal {
			t.Errorf("terminal %v: stdout\n%s", terminal, out.String())
		}
		if first, _, _ := strings.Cut(out.String(), "\n"); !strings.HasPrefix(first, "node 12D3KooW") {
			t.Errorf("first line %q is not the start line", first)
		}
	}
}

func multiaddrStrings(addrs []ma.Multiaddr) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }
